package redisfleet_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// reloadReplica starts a Loop on prefix with its own client, and on dir
// (a RAM store when dir is ""), flushing to the fleet every 50 ms.
func reloadReplica(t *testing.T, s *server, prefix, dir string, opts ...si.Option) *si.Loop {
	t.Helper()
	store := si.WithStore(si.NewRAMStore())
	if dir != "" {
		store = si.WithDir(dir)
	}
	o := append([]si.Option{store, si.WithFleet(newFleet(t, client(t, s), prefix)), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithFleetFlush(50*time.Millisecond, 1024), si.WithFleetTimeout(300 * time.Millisecond)}, opts...)
	l, err := si.New(o...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestEvictedAgentsCallsReachTheFleet: a replica that evicts an agent
// (WithMaxAgents) and loads it again goes on numbering its deltas above
// the last (FleetDelta.Batch), so that the fleet books its calls. Before,
// an agent loaded again numbered its deltas from 1 afresh, and the fleet,
// which books a replica's number once, dropped them: 12 calls made, 3
// counted.
func TestEvictedAgentsCallsReachTheFleet(t *testing.T) {
	s := startRedis(t)
	a := reloadReplica(t, s, "lost:", "", si.WithMaxAgents(1))
	ctx := context.Background()
	made := 0
	for range 4 {
		for range 3 {
			a.ExecuteWithImprovement(ctx, "x", ok)
			made++
		}
		syncTwice(t, []*si.Loop{a})
		a.ExecuteWithImprovement(ctx, "y", ok) // x is evicted
		syncTwice(t, []*si.Loop{a})
	}
	if got := pooledTotal(t, client(t, s), "lost:", "x"); got != int64(made) {
		t.Errorf("the fleet counts %d calls of x, %d were made (x evicted and loaded again 3 times)", got, made)
	}
}

// TestRestartedReplicaCountsNoCallTwice: a replica restarted on its own
// directory takes the statistics it saved, which hold the fleet's calls
// it had booked, and books only the calls made since. Before, its first
// pool booked every earlier call of the fleet again: 27 calls and 24
// failures for 14 and 12, which fed its threshold and health.
func TestRestartedReplicaCountsNoCallTwice(t *testing.T) {
	s := startRedis(t)
	dirA := t.TempDir()
	a := reloadReplica(t, s, "twice:", dirA)
	b := reloadReplica(t, s, "twice:", "")
	ctx := context.Background()
	id := "agent"
	if err := a.SetThreshold(id, si.Threshold{Failures: 30, Window: time.Hour, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	boom := func(context.Context, si.Config) error { return errors.New("boom") }
	for range 12 {
		a.ExecuteWithImprovement(ctx, id, boom)
	}
	b.ExecuteWithImprovement(ctx, id, ok)
	syncTwice(t, []*si.Loop{a, b})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := reloadReplica(t, s, "twice:", dirA)
	a2.ExecuteWithImprovement(ctx, id, ok)
	syncTwice(t, []*si.Loop{a2, b})
	if st := a2.Stats(id); st.Calls != 14 || st.Failures != 12 {
		t.Errorf("restarted replica: Stats %d calls, %d failures; 14 calls were made, 12 failed", st.Calls, st.Failures)
	}
	if got := pooledTotal(t, client(t, s), "twice:", id); got != 14 {
		t.Errorf("the fleet counts %d calls, 14 were made", got)
	}
}

// TestSyncFleetHonoursItsContext: with Redis hung (SIGSTOP), SyncFleet
// returns when its context ends. Before, it ignored the context: with a
// 50 ms context it took from 0.6 s to 37 s, waiting on the flush lock the
// background flusher kept taking, each of its flushes two fleet timeouts.
func TestSyncFleetHonoursItsContext(t *testing.T) {
	s := startRedis(t)
	l := reloadReplica(t, s, "sync:", "", si.WithFleetTimeout(2*time.Second))
	ctx := context.Background()
	l.ExecuteWithImprovement(ctx, "a", ok)
	syncTwice(t, []*si.Loop{l})
	s.cmd.Process.Signal(syscall.SIGSTOP)
	defer s.cmd.Process.Signal(syscall.SIGCONT)
	for i := range 3 {
		l.ExecuteWithImprovement(ctx, "a", ok)
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		start := time.Now()
		err := l.SyncFleet(cctx)
		took := time.Since(start)
		cancel()
		// The bound is the context's 50 ms, with room for a loaded
		// machine; the fleet timeout is 2 s.
		if took > time.Second || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("SyncFleet %d with a 50 ms context, Redis stopped: %v after %v; want the context's error at its deadline", i, err, took)
		}
	}
}

// TestHugePooledCountsRefused: counts planted in the fleet beyond what an
// agent's state holds (its counters stay below 2^50; the fleet's scripts
// take up to 4e18) are refused, not booked: the replica keeps saving the
// agent. Before, it booked them, and every save of the agent failed
// after ("calls.total: 4000000000000000002 out of range"), every
// decision with it, until the process ended.
func TestHugePooledCountsRefused(t *testing.T) {
	s := startRedis(t)
	admin := client(t, s)
	ctx := context.Background()
	a := reloadReplica(t, s, "huge:", t.TempDir())
	id := "h"
	a.ExecuteWithImprovement(ctx, id, ok)
	syncTwice(t, []*si.Loop{a})
	plant(t, admin, `redis.call('HSET', KEYS[1], 'tc', '4000000000000000000')`, agentKey("huge:", id, "n"))
	for i := range 3 {
		a.ExecuteWithImprovement(ctx, id, ok)
		syncTwice(t, []*si.Loop{a})
		if err := a.SetConfig(id, si.Config{Route: fmt.Sprint("after", i)}); err != nil {
			t.Errorf("SetConfig %d after the plant: %v", i, err)
		}
	}
	if st := a.Stats(id); st.TotalCalls > 100 {
		t.Errorf("the planted count was booked: %d calls in all", st.TotalCalls)
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close after the plant: %v", err)
	}
}
