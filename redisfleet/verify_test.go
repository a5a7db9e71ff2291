package redisfleet_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// The pooled verification of issue 28, item 6: a harmful change is
// rolled back after no more calls fleet-wide than one loop needs, with
// the replicas calling at once, as fast as they can, and the counts
// flushed every 50 ms.

// harmful is a trial's agent: it fails from the start (the fault), the
// strategy moves it to route "backup", which fails too; bad counts the
// calls that ran on "backup".
type harmful struct {
	bad  atomic.Int64
	runs atomic.Int64
}

func (h *harmful) Analyze(context.Context, si.Analysis) (*si.Tweak, error) {
	h.runs.Add(1)
	return &si.Tweak{Config: si.Config{Route: "backup"}, Reason: "route around the fault"}, nil
}

var errHarm = errors.New("upstream: 503 service unavailable")

func (h *harmful) call(_ context.Context, cfg si.Config) error {
	if cfg.Route == "backup" {
		h.bad.Add(1)
	}
	return errHarm
}

func harmOptions(h *harmful) []si.Option {
	return []si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(h),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}), si.WithStrategyTimeout(2 * time.Second),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1})}
}

// harmTrial makes the loops ls call agent id, callers goroutines each,
// until the harmful change is applied and rolled back; it returns the
// calls made on "backup" and the calls the rollback was decided on.
func harmTrial(t *testing.T, ls []*si.Loop, h *harmful, id string, callers int) (bad, counted int) {
	t.Helper()
	if err := ls[0].SetThreshold(id, si.Threshold{Failures: 5, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var rolled atomic.Bool
	for _, l := range ls {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2000 && !rolled.Load(); i++ {
					rep, _ := l.ExecuteWithImprovement(context.Background(), id, h.call)
					if rep.Rollback != nil || slices.ContainsFunc(l.Changes(id), func(c si.Change) bool { return c.State == si.ChangeRolledBack }) {
						rolled.Store(true)
					}
				}
			}()
		}
	}
	wg.Wait()
	if !rolled.Load() {
		t.Fatalf("%s: the harmful change was not rolled back after 2000 calls per caller", id)
	}
	for _, l := range ls {
		for _, c := range l.Changes(id) {
			if c.State == si.ChangeRolledBack {
				counted = max(counted, c.After.Calls)
			}
		}
	}
	return int(h.bad.Load()), counted
}

func TestPooledVerificationAsOneLoop(t *testing.T) {
	s := startRedis(t)
	const trials = 5
	var one, oneWide, fleet, fleetCounted []int
	for i := range trials {
		h := &harmful{}
		l, err := si.New(harmOptions(h)...)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := harmTrial(t, []*si.Loop{l}, h, "one", 1)
		one = append(one, n)
		l.Close()

		h = &harmful{}
		l, err = si.New(harmOptions(h)...)
		if err != nil {
			t.Fatal(err)
		}
		n, _ = harmTrial(t, []*si.Loop{l}, h, "wide", 3)
		oneWide = append(oneWide, n)
		l.Close()

		h = &harmful{}
		var ls []*si.Loop
		for range 3 {
			f := newFleet(t, client(t, s), "verify"+string(rune('0'+i))+":")
			l, err := si.New(append(harmOptions(h), si.WithFleet(f), si.WithFleetFlush(50*time.Millisecond, 1024),
				si.WithFleetTimeout(300*time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		n, c := harmTrial(t, ls, h, "fleet", 1)
		fleet, fleetCounted = append(fleet, n), append(fleetCounted, c)
		if r := h.runs.Load(); r != 1 {
			t.Errorf("trial %d: the strategy ran %d times in the fleet, want 1", i, r)
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Logf("calls on the harmful route until its rollback, %d trials: one loop, one caller %v; one loop, 3 callers %v; "+
		"3 replicas, one caller each %v (the rollback decided on %v pooled calls)", trials, one, oneWide, fleet, fleetCounted)
	need := slices.Max(one)
	for i := range trials {
		// The decision is taken on the calls one loop needs (one more
		// when two replicas decide at once and the later count wins the
		// commit); the calls in flight then, one for each other replica,
		// also ran on the harmful route, as in one loop with 3 callers.
		if fleet[i] > need+2 || fleetCounted[i] > need+1 {
			t.Errorf("trial %d: 3 replicas ran %d calls on the harmful route, the rollback decided on %d; one loop needs %d",
				i, fleet[i], fleetCounted[i], need)
		}
	}
}
