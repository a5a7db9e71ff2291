package redisfleet_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 26, item 6, on a real Redis: dead routes, probes and account-wide
// causes are shared by the replicas.

var (
	errQuota   = errors.New("429 insufficient_quota: You exceeded your current quota, please check your plan and billing details")
	err503     = errors.New("upstream: 503 service unavailable")
	errGoneBkp = errors.New("404 model_not_found: the model `backup` does not exist")
)

// routeReplicas returns n Loops sharing one Redis fleet and a fake
// clock, with the ladder primary → backup → spare, two attempts a call,
// and probes every 300 ms. Counts and notes go to the fleet on sync.
func routeReplicas(t *testing.T, s *server, n int) ([]*si.Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	var out []*si.Loop
	for range n {
		f := newFleet(t, client(t, s), "routes:")
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithLogger(quiet), si.WithNotifier(nil),
			si.WithClock(clk), si.WithFleetFlush(0, 1<<30), si.WithFleetTimeout(2*time.Second),
			si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}),
			si.WithDefaultConfig(si.Config{MaxAttempts: 2}),
			si.WithProbes(si.ProbePolicy{Every: 300 * time.Millisecond, MaxEvery: 300 * time.Millisecond, ReturnEvery: 300 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		out = append(out, l)
	}
	return out, clk
}

// syncAll syncs every replica with the fleet.
func syncAll(t *testing.T, ls []*si.Loop) {
	t.Helper()
	for i, l := range ls {
		if err := l.SyncFleet(context.Background()); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
}

// count counts the events of typ over the replicas.
func count(ls []*si.Loop, typ si.EventType) (n int) {
	for _, l := range ls {
		n += len(l.Events(si.EventFilter{Types: []si.EventType{typ}}))
	}
	return n
}

func callRoute(l *si.Loop, id string, sent *atomic.Int64, up func(route string) error) error {
	_, err := l.ExecuteWithImprovement(context.Background(), id, func(_ context.Context, cfg si.Config) error {
		sent.Add(1)
		return up(cfg.Route)
	})
	return err
}

func TestReplicasShareDeadRoutes(t *testing.T) {
	ls, clk := routeReplicas(t, startRedis(t), 3)
	var sent, toBackup atomic.Int64
	up := func(route string) error {
		switch route {
		case "", "primary":
			return err503
		case "backup":
			toBackup.Add(1)
			return errGoneBkp
		}
		return nil
	}
	callRoute(ls[0], "a", &sent, up)
	clk.Advance(2 * time.Second) // a poll is due
	syncAll(t, ls)
	if ds := ls[2].DeadRoutes(); len(ds) != 1 || ds[0].Route != "backup" {
		t.Fatalf("replica 2's dead routes %+v", ds)
	}
	for _, l := range ls[1:] {
		if err := callRoute(l, "b", &sent, up); err != nil {
			t.Fatalf("a call on another replica: %v", err)
		}
	}
	if n := toBackup.Load(); n != 1 {
		t.Fatalf("%d requests to the dead backup, want the one that found it", n)
	}
	if n := count(ls, si.EventRouteDead); n != 1 {
		t.Fatalf("%d route-dead events, want 1", n)
	}
}

// Three agents on three replicas held for one quota cause: one alert, one
// probe per agent per interval while 9 callers run at once, one end.
func TestReplicasShareAccountCause(t *testing.T) {
	ls, clk := routeReplicas(t, startRedis(t), 3)
	var quota atomic.Bool
	quota.Store(true)
	var sent atomic.Int64
	up := func(string) error {
		if quota.Load() {
			return errQuota
		}
		return nil
	}
	ids := []string{"a", "b", "c"}
	for i, l := range ls {
		callRoute(l, ids[i], &sent, up)
		callRoute(l, ids[i], &sent, up)
	}
	syncAll(t, ls)
	if n := count(ls, si.EventAccountCause); n != 1 {
		t.Fatalf("%d account-wide alerts over 3 replicas, want 1", n)
	}
	// Held: 30 rounds of 100 ms, each with a call of every agent from
	// every replica at once: 10 intervals of 300 ms.
	sent.Store(0)
	for range 30 {
		clk.Advance(100 * time.Millisecond)
		var wg sync.WaitGroup
		for _, l := range ls {
			for _, id := range ids {
				wg.Go(func() { callRoute(l, id, &sent, up) })
			}
		}
		wg.Wait()
		syncAll(t, ls)
	}
	t.Logf("%d requests for 3 held agents on 3 replicas, 9 callers at once, in 10 intervals", sent.Load())
	if n := sent.Load(); n > 3*10 {
		t.Fatalf("%d requests, more than one per agent per interval (30)", n)
	}
	quota.Store(false)
	clk.Advance(400 * time.Millisecond)
	for _, l := range ls {
		for _, id := range ids {
			callRoute(l, id, &sent, up)
		}
	}
	syncAll(t, ls)
	if n := count(ls, si.EventAccountRecovered); n != 1 {
		t.Fatalf("%d ends of the cause over 3 replicas, want 1", n)
	}
}

// An agent moved off its primary on one replica is away on every replica,
// and the probe of the primary is the fleet's: one request to the primary
// per probe interval while 9 callers on 3 replicas run at once. When the
// primary answers again, one replica's probe brings the agent home on
// all.
func TestReplicasShareProbeOfPrimary(t *testing.T) {
	ls, clk := routeReplicas(t, startRedis(t), 3)
	var down atomic.Bool
	down.Store(true)
	var sent, toPrimary atomic.Int64
	up := func(route string) error {
		if route == "" || route == "primary" {
			toPrimary.Add(1)
			if down.Load() {
				return err503
			}
		}
		return nil
	}
	away := func(l *si.Loop) bool { v, _ := l.View("a"); return v.Home != "" }
	for i := 0; !away(ls[0]); i++ { // moved, and the move verified
		if i == 200 {
			t.Fatalf("not away on the backup after 200 calls: %+v", ls[0].Changes("a"))
		}
		callRoute(ls[0], "a", &sent, up)
		clk.Advance(100 * time.Millisecond)
	}
	clk.Advance(2 * time.Second) // a poll is due
	syncAll(t, ls)
	for i, l := range ls {
		if v, _ := l.View("a"); l.Config("a").Route != "backup" || v.Home != "primary" {
			t.Fatalf("replica %d: route %q, home %q, next %q; want away on the backup; changes %+v", i, l.Config("a").Route, v.Home, v.Next, l.Changes("a"))
		}
	}
	toPrimary.Store(0)
	for range 30 { // 10 intervals of 300 ms
		clk.Advance(100 * time.Millisecond)
		var wg sync.WaitGroup
		for _, l := range ls {
			for range 3 {
				wg.Go(func() { callRoute(l, "a", &sent, up) })
			}
		}
		wg.Wait()
		syncAll(t, ls)
	}
	t.Logf("%d requests to the primary from 3 replicas, 9 callers at once, in 10 probe intervals", toPrimary.Load())
	if n := toPrimary.Load(); n == 0 || n > 10+1 {
		t.Fatalf("%d requests to the primary in 10 intervals, want at least 1 and at most one per interval", n)
	}
	down.Store(false)
	for i := 0; i < 200 && ls[2].Config("a").Route == "backup"; i++ {
		clk.Advance(100 * time.Millisecond)
		callRoute(ls[i%3], "a", &sent, up)
		syncAll(t, ls)
	}
	for i, l := range ls {
		if r := l.Config("a").Route; r != "" && r != "primary" {
			t.Errorf("replica %d: route %q after the primary recovered, want home", i, r)
		}
	}
}
