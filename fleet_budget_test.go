package selfimprove_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// budgetFleet is two replicas on a fleet with a 100 ms timeout, whose
// operations take the delay the test sets, with a circuit breaker that
// opens at the first failure and agent "a"'s threshold never crossed.
func budgetFleet(t *testing.T) (*fleetEnv, *slowFleet) {
	e, slow := slowEnv(t, 2, &countingStrategy{}, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 1}))
	if err := e.reps[0].SetThreshold("a", manual(50)); err != nil {
		t.Fatal(err)
	}
	e.sync()
	return e, slow
}

// TestFleetCallWithinTimeout: what a call waits on the fleet, in all, is
// one fleet timeout (issue 28, item 1), also when the call loads an agent
// new to the replica and when its decision waits for another's save.
//   - new: replica 1's first call of an agent the fleet knows loads it
//     (60 ms of the 100 ms), then fails and opens the circuit, whose
//     commit has 40 ms left, times out, and is taken back
//     (ErrFleetUnavailable in the Report). Before, the load had a
//     timeout of its own: 120 ms.
//   - queued: a call on replica 0 opens the circuit while a SetConfig's
//     commit holds the agent's save (60 ms): the call waits for the save
//     50 ms, then commits with 50 ms left. Before, its wait for the save
//     was not counted: 110 ms.
func TestFleetCallWithinTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	t.Run("new", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e, slow := budgetFleet(t)
			slow.delay.Store(int64(timeout * 6 / 10))
			start := time.Now()
			rep := e.call(1, "a", errBoom) // replica 1's first call of "a": it loads the agent
			if d := time.Since(start); d > timeout || !errors.Is(rep.LoopErr, si.ErrFleetUnavailable) {
				t.Errorf("the call waited %v on the fleet (timeout %v), LoopErr %v; want ErrFleetUnavailable within the timeout", d, timeout, rep.LoopErr)
			}
		})
	})
	t.Run("queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e, slow := budgetFleet(t)
			slow.delay.Store(int64(timeout * 6 / 10))
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := e.reps[0].SetConfig("a", si.Config{Route: "x"}); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(timeout / 10)
			start := time.Now()
			rep := e.call(0, "a", errBoom) // opens the circuit
			if d := time.Since(start); d > timeout || rep.LoopErr != nil && !errors.Is(rep.LoopErr, si.ErrFleetUnavailable) {
				t.Errorf("the call that opened the circuit waited %v on the fleet (timeout %v), LoopErr %v", d, timeout, rep.LoopErr)
			}
			wg.Wait()
		})
	})
}

// TestFleetSlowFnNotCounted: a call's fleet time is a deadline, paused
// while fn runs. Replica 1's first call of an agent loads it (30 ms of
// the 100 ms), then fn runs 300 ms and fails, and the circuit it opens
// is committed (30 ms): the commit has the 70 ms the load left it. With
// fn's time counted, the commit would not be tried (ErrFleetUnavailable).
func TestFleetSlowFnNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		e, slow := budgetFleet(t)
		slow.delay.Store(int64(timeout * 3 / 10))
		rep, _ := e.reps[1].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			time.Sleep(3 * timeout)
			return errBoom
		})
		if rep.LoopErr != nil {
			t.Fatalf("LoopErr %v: the decision after a slow fn had no fleet time left", rep.LoopErr)
		}
		slow.delay.Store(0)
		e.sync()
		if _, err := e.reps[0].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
			t.Errorf("replica 0: %v, want the circuit replica 1 opened", err)
		}
	})
}

// TestFleetSlowStrategyNotCounted: the strategy's run is not counted in
// the fleet time of the call that crossed the threshold (it has its own
// timeout). Every fleet operation takes 30 ms of the 100 ms; the
// strategy answers after 300 ms; the lease, the reload and the commit
// fit in the call's time. Counting the strategy, the change was taken
// back (the commit not tried).
func TestFleetSlowStrategyNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = slowTimeout
		strat := &countingStrategy{tweak: si.Config{Route: "backup"}, gate: make(chan struct{})}
		e, slow := slowEnv(t, 2, strat)
		if err := e.reps[0].SetThreshold("a", manual(3)); err != nil {
			t.Fatal(err)
		}
		e.sync()
		slow.delay.Store(int64(timeout * 3 / 10))
		go func() {
			time.Sleep(3 * timeout)
			close(strat.gate)
		}()
		var rep si.Report
		for range 3 {
			rep = e.call(0, "a", errBoom)
		}
		if rep.Improvement == nil || rep.LoopErr != nil {
			t.Fatalf("the call that crossed the threshold: change %v, LoopErr %v; want the change made", rep.Improvement, rep.LoopErr)
		}
		slow.delay.Store(0)
		time.Sleep(timeout)
		e.sync()
		if c := e.reps[1].Config("a"); c.Route != "backup" {
			t.Errorf("replica 1 runs %+v, want the change", c)
		}
	})
}
