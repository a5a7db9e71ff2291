package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// slowFleet is a fleettest.Fleet whose operations, while delay is set,
// each take delay before they run (or end with their context, the fleet
// unreachable): a fleet that answers, slowly. It tells no subscriber (a
// notification may be lost): a replica finds another's commit by a
// conflict.
type slowFleet struct {
	*fleettest.Fleet
	delay atomic.Int64
}

func (f *slowFleet) wait(ctx context.Context) error {
	d := time.Duration(f.delay.Load())
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", si.ErrFleetUnavailable, ctx.Err())
	}
}

func (f *slowFleet) Subscribe(func(string, uint64)) func() { return func() {} }

// slowTimeout is the fleet timeout of the tests on a slowFleet.
const slowTimeout = 100 * time.Millisecond

// slowEnv is n replicas, with strat (nil: none) and opts, on a slowFleet
// with a fleet timeout of slowTimeout, whose operations take the delay
// the test sets (none at first).
func slowEnv(t *testing.T, n int, strat si.Strategy, opts ...si.Option) (*fleetEnv, *slowFleet) {
	t.Helper()
	clk := fakeclock.New(t0)
	mem := fleettest.New(clk)
	slow := &slowFleet{Fleet: mem}
	e := &fleetEnv{t: t, clk: clk, fleet: slow, mem: mem, strat: strat, opts: append([]si.Option{si.WithFleetTimeout(slowTimeout)}, opts...)}
	for range n {
		e.add()
	}
	return e, slow
}

func (f *slowFleet) Load(ctx context.Context, id string) (uint64, []byte, error) {
	if err := f.wait(ctx); err != nil {
		return 0, nil, err
	}
	return f.Fleet.Load(ctx, id)
}

func (f *slowFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.Fleet.Commit(ctx, id, rev, v)
}

func (f *slowFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.Fleet.Add(ctx, d)
}

func (f *slowFleet) Lease(ctx context.Context, id, owner string, ttl time.Duration) (bool, error) {
	if err := f.wait(ctx); err != nil {
		return false, err
	}
	return f.Fleet.Lease(ctx, id, owner, ttl)
}

func (f *slowFleet) Release(ctx context.Context, id, owner string) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	return f.Fleet.Release(ctx, id, owner)
}

func (f *slowFleet) AppendEvents(ctx context.Context, evs []si.Event) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	return f.Fleet.AppendEvents(ctx, evs)
}

// TestFleetChainWithinTimeout: a fleet whose every operation takes 30 %
// of the fleet timeout (each within it) makes no call or operator method
// wait on it longer than the timeout in all: a SetConfig that loses a
// race (commit, reload after the conflict, commit again) and the call
// whose strategy run is decided and committed (lease, reload, commit,
// release). Before, each operation had a timeout of its own and the
// events went to the fleet's log on the caller's path: 120 ms and 150 ms
// for a 100 ms timeout. The decisions reported as made are in the fleet,
// with their events in its log.
func TestFleetChainWithinTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = slowTimeout
		e, slow := slowEnv(t, 2, &countingStrategy{tweak: si.Config{Route: "backup"}})
		mem := e.mem
		if err := e.reps[0].SetThreshold("a", manual(3)); err != nil {
			t.Fatal(err)
		}
		e.sync()
		slow.delay.Store(int64(timeout * 3 / 10))
		timed := func(what string, f func()) {
			t.Helper()
			start := time.Now()
			f()
			if d := time.Since(start); d > timeout {
				t.Errorf("%s waited %v on the fleet, more than its timeout %v", what, d, timeout)
			}
		}
		timed("a SetConfig", func() {
			if err := e.reps[1].SetConfig("a", si.Config{Route: "x"}); err != nil {
				t.Fatal(err)
			}
		})
		timed("a SetConfig behind another replica's", func() {
			if err := e.reps[0].SetConfig("a", si.Config{Route: "y"}); err != nil {
				t.Fatal(err)
			}
		})
		var rep si.Report
		for i := range 3 {
			timed(fmt.Sprintf("call %d", i), func() { rep = e.call(0, "a", errBoom) })
		}
		if rep.Improvement == nil {
			t.Fatalf("the call that crossed the threshold made no change (report %+v)", rep)
		}
		slow.delay.Store(0)
		time.Sleep(timeout) // the flusher's operations under way end (a mutex wait is not durable in the bubble)
		e.sync()
		e.sync()
		if c := e.reps[1].Config("a"); c.Route != "backup" {
			t.Fatalf("replica 1 runs %+v, want the change reported as made", c)
		}
		evs, err := mem.Events(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var applied int
		for _, ev := range evs {
			if ev.Type == si.EventImprovementApplied {
				applied++
			}
		}
		if applied != 1 {
			t.Fatalf("the fleet's log holds %d EventImprovementApplied, want 1 (events %d)", applied, len(evs))
		}
		queued(t, e, slow, timeout)
	})
}

// queued: two SetConfigs on one agent and replica, the second 10 ms
// after the first, on a fleet whose operations take 60 % of the timeout:
// the second waits for the first's save, then has 40 ms left for its
// commit, which the fleet does not answer in time: ErrFleetUnavailable,
// and its config is not in force. Before, the first held the save for
// its commit and its events (120 ms), and the second waited 230 ms. The
// replica does not back off for it (before cut, it did: FleetOutages 1).
func queued(t *testing.T, e *fleetEnv, slow *slowFleet, timeout time.Duration) {
	slow.delay.Store(int64(timeout * 6 / 10))
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * timeout / 10) // the second after the first's save began
			start := time.Now()
			errs[i] = e.reps[0].SetConfig("a", si.Config{Route: fmt.Sprint("q", i)})
			if d := time.Since(start); d > timeout {
				t.Errorf("SetConfig %d waited %v on the fleet, more than its timeout %v", i, d, timeout)
			}
		})
	}
	wg.Wait()
	// The fleet answered the chain's first operations, slowly: the commit
	// that ran out of its chain's time does not mark it down.
	if m := e.reps[0].Metrics(); m.FleetDown != 0 || m.FleetOutages != 0 {
		t.Errorf("after a commit out of its chain's time: FleetDown %d, FleetOutages %d; want a slow fleet, not down", m.FleetDown, m.FleetOutages)
	}
	slow.delay.Store(0)
	time.Sleep(timeout)
	e.clk.Advance(2 * time.Second) // the outage, if any, is over
	e.sync()
	if got := e.reps[1].Config("a").Route; errs[0] != nil || !errors.Is(errs[1], si.ErrFleetUnavailable) || got != "q0" {
		t.Fatalf("SetConfigs returned %v, replica 1 runs %q; want nil and ErrFleetUnavailable, and q0", errs, got)
	}
}

// TestFleetHangMarksDown: a commit that had more than half its chain's
// time and got no answer in it (a hang) marks the fleet down at once, as
// a refusal does, though the chain's wait for the agent's save spent some
// of that time: only an operation left half the timeout or less is taken
// for a slow fleet (see TestFleetChainWithinTimeout). Here the second
// SetConfig waits 30 ms for the first's save, then its commit hangs.
func TestFleetHangMarksDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = slowTimeout
		e, slow := slowEnv(t, 1, &countingStrategy{})
		if err := e.reps[0].SetConfig("a", si.Config{Route: "x"}); err != nil {
			t.Fatal(err)
		}
		slow.delay.Store(int64(timeout * 3 / 10))
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				errs[i] = e.reps[0].SetConfig("a", si.Config{Route: fmt.Sprint("h", i)})
			})
		}
		time.Sleep(timeout / 10)
		slow.delay.Store(int64(10 * timeout)) // hangs from now on
		wg.Wait()
		if errs[0] != nil || !errors.Is(errs[1], si.ErrFleetUnavailable) {
			t.Fatalf("SetConfigs returned %v; want nil, then ErrFleetUnavailable", errs)
		}
		if m := e.reps[0].Metrics(); m.FleetDown != 1 || m.FleetOutages != 1 {
			t.Errorf("after a hung commit with 70 ms of 100 left: FleetDown %d, FleetOutages %d; want the fleet down", m.FleetDown, m.FleetOutages)
		}
		slow.delay.Store(0)
		time.Sleep(timeout)
	})
}
