package redisfleet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/redisfleet"
)

// server is a redis-server the test started on a free loopback port.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free port with a temporary
// directory, and stops it when the test ends. Without the binary it skips
// (fails under CI).
func startRedis(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found (CI): install with: apt-get install -y redis-server")
		}
		t.Skip("redis-server not found: install with: apt-get install -y redis-server")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	s.start(t, bin, port, t.TempDir())
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *server) start(t testing.TB, bin string, port int, dir string) {
	t.Helper()
	s.dir = dir
	s.cmd = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no", "--enable-debug-command", "local")
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

func client(t testing.TB, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func newFleet(t testing.TB, c redis.UniversalClient, prefix string) *redisfleet.Fleet {
	t.Helper()
	f, err := redisfleet.New(c, redisfleet.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSuite(t *testing.T) {
	s := startRedis(t)
	n := 0
	fleettest.Run(t, func(t *testing.T) (si.Fleet, si.Fleet) {
		n++
		prefix := fmt.Sprintf("suite%d:", n)
		return newFleet(t, client(t, s), prefix), newFleet(t, client(t, s), prefix)
	})
}

func TestKeysStayUnderThePrefix(t *testing.T) {
	s := startRedis(t)
	c := client(t, s)
	f := newFleet(t, c, "app:")
	ctx := context.Background()
	ids := []string{"a/b", "{x}", "\x00", "\xff", strings.Repeat("z", si.MaxAgentIDLen)}
	for _, id := range ids {
		if _, err := f.Commit(ctx, id, 0, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Add(ctx, []si.FleetDelta{{AgentID: id, Gen: 1, Change: si.FleetCounts{Calls: 1, Failures: 1},
			Failures: []si.FleetFailure{{Text: "boom"}}}}); err != nil {
			t.Fatal(err)
		}
		f.Lease(ctx, id, "r", time.Minute)
	}
	f.AppendEvents(ctx, []si.Event{{ID: "1"}})
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4*len(ids)+1 {
		t.Fatalf("%d keys, want %d: %q", len(keys), 4*len(ids)+1, keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "app:") || len(k) > 64 {
			t.Fatalf("key %q outside the prefix or of unbounded length", k)
		}
	}
	// A Loop refuses an agent ID longer than MaxAgentIDLen before any key.
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(ctx, strings.Repeat("z", si.MaxAgentIDLen+1), func(context.Context, si.Config) error { return nil })
	if rep.LoopErr == nil {
		t.Fatal("an agent ID of 1,025 bytes was accepted")
	}
	if n, _ := c.DBSize(ctx).Result(); n != int64(len(keys)) {
		t.Fatalf("%d keys after the refused ID, want %d", n, len(keys))
	}
}

// TestNotesPlanted checks that notes stay bounded when the hash holds what
// the scripts never write: a value of 1 MB, a field that is no note, and
// more fields than twice the cap.
func TestNotesPlanted(t *testing.T) {
	s := startRedis(t)
	c := client(t, s)
	f := newFleet(t, c, "p:")
	ctx := context.Background()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	until := fmt.Sprint(now.Add(time.Hour).UnixMilli())
	c.HSet(ctx, "p:notes", "5:routehuge", until+" "+strings.Repeat("x", 1<<20), "5:routebad", "soon", "5:routeok", until+" fine")
	got, err := f.Notes(ctx, "route", now)
	if err != nil || len(got) != 1 || got[0].Route != "ok" || got[0].Reason != "fine" {
		t.Fatalf("Notes with planted values: %+v %v", got, err)
	}
	for i := range 3 * si.MaxFleetNotes {
		c.HSet(ctx, "p:notes", fmt.Sprint("5:route", i), until+" x")
	}
	if got, err := f.Notes(ctx, "route", now); err != nil || len(got) != 0 {
		t.Fatalf("Notes of an oversized hash: %d notes, %v; want none", len(got), err)
	}
	if was, err := f.Note(ctx, "route", "gpt-4o", "dead", now.Add(time.Hour), now); err != nil || was {
		t.Fatalf("Note on an oversized hash: %v %v", was, err)
	}
	if n, _ := c.HLen(ctx, "p:notes").Result(); n != 1 {
		t.Fatalf("the oversized hash has %d fields after a Note, want 1", n)
	}
}

func redisfleetNew(c redis.UniversalClient, prefix string) (*redisfleet.Fleet, error) {
	return redisfleet.New(c, redisfleet.Options{Prefix: prefix})
}

var fleettestRun = fleettest.Run
