package redisfleet_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replicas returns n Loops sharing one Redis fleet, each with its own
// client and memory store.
func replicas(t *testing.T, s *server, n int) []*si.Loop {
	t.Helper()
	var out []*si.Loop
	for range n {
		f := newFleet(t, client(t, s), "loop:")
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithNotifier(nil), si.WithLogger(quiet),
			si.WithFleetFlush(50*time.Millisecond, 1024), si.WithFleetTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		out = append(out, l)
	}
	return out
}

func ok(context.Context, si.Config) error { return nil }

// waitVersion waits until every replica runs version v of id, and
// returns how long it took; it fails the test after 5 seconds.
func waitVersion(t *testing.T, ls []*si.Loop, id string, v int) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		all := true
		for _, l := range ls {
			if l.Config(id).Version != v {
				all = false
			}
		}
		if all {
			return time.Since(start)
		}
		if time.Since(start) > 5*time.Second {
			var vs []int
			for _, l := range ls {
				vs = append(vs, l.Config(id).Version)
			}
			t.Fatalf("version %d of %q not in force everywhere after 5s: replicas run %v", v, id, vs)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReplicasShareConfigs(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 3)
	ctx := context.Background()
	for _, l := range ls {
		l.ExecuteWithImprovement(ctx, "writer", ok)
	}
	var worst time.Duration
	for i := range 10 {
		if err := ls[i%3].SetConfig("writer", si.Config{Route: "r" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, waitVersion(t, ls, "writer", i+2))
	}
	t.Logf("a config change in force on every replica within %v (worst of 10)", worst)
	if worst > time.Second {
		t.Fatalf("propagation took %v, more than 1s", worst)
	}
}

func TestRedisRestart(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 2)
	ctx := context.Background()
	if err := ls[0].SetConfig("a", si.Config{Route: "main"}); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		l.ExecuteWithImprovement(ctx, "a", ok)
	}
	waitVersion(t, ls, "a", 2)

	port, _ := strconv.Atoi(s.addr[strings.LastIndex(s.addr, ":")+1:])
	s.stop()
	// Down: calls run under the last config, changes are refused.
	for range 20 {
		rep, err := ls[1].ExecuteWithImprovement(ctx, "a", ok)
		if err != nil || rep.ConfigVersion != 2 {
			t.Fatalf("call while Redis is down: %v, version %d", err, rep.ConfigVersion)
		}
	}
	if err := ls[0].SetConfig("a", si.Config{Route: "x"}); !errors.Is(err, si.ErrFleetUnavailable) {
		t.Fatalf("SetConfig while Redis is down: %v", err)
	}
	bin, _ := exec.LookPath("redis-server")
	s.start(t, bin, port, t.TempDir())
	// Redis came back empty (no persistence): the next decision writes
	// the agent's state again, and every replica takes it.
	deadline := time.Now().Add(10 * time.Second)
	for ls[0].SetConfig("a", si.Config{Route: "after"}) != nil {
		if time.Now().After(deadline) {
			t.Fatal("SetConfig still failing 10s after Redis came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	v := ls[0].Config("a").Version
	waitVersion(t, ls, "a", v)
	if m := ls[1].Metrics(); m.FleetErrors == 0 {
		t.Fatalf("replica 1 counted no fleet error: %+v", m)
	}
}

// TestReplicasSeen checks that replicas sharing a Redis fleet see each
// other (Loop.FleetReplicas), and that a closed one drops out.
func TestReplicasSeen(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 3)
	sync := func(ls []*si.Loop) {
		for _, l := range ls {
			if err := l.SyncFleet(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	sync(ls)
	sync(ls)
	for i, l := range ls {
		got := l.FleetReplicas()
		for _, o := range ls {
			if at, ok := got[o.Metrics().FleetReplica]; !ok || time.Since(at) > 20*time.Second {
				t.Fatalf("replica %d sees %v: not %s", i, got, o.Metrics().FleetReplica)
			}
		}
		if len(got) != 3 || l.Metrics().FleetReplicas != 3 {
			t.Fatalf("replica %d sees %d replicas (Metrics %d), want 3", i, len(got), l.Metrics().FleetReplicas)
		}
	}
	if err := ls[2].Close(); err != nil {
		t.Fatal(err)
	}
	sync(ls[:2])
	if got := ls[0].FleetReplicas(); len(got) != 2 || ls[0].Metrics().FleetReplicas != 2 {
		t.Fatalf("after one replica closed, replica 0 sees %v", got)
	}
}
