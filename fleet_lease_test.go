package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetLeaseGivenBackAfterSpentBudget: the call that crosses the
// threshold takes the lease, reloads and commits the strategy's change,
// each operation taking 32 % of the fleet timeout: 96 % of it is spent,
// too little is left to give the lease back on the call's path. The
// flusher gives it back, off that path, within one fleet timeout: another
// replica can take it at once. Before, it was held until it expired (the
// strategy timeout plus four fleet timeouts: 30.4 s here).
func TestFleetLeaseGivenBackAfterSpentBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = slowTimeout
		e, slow := slowEnv(t, 1, &countingStrategy{tweak: si.Config{Route: "backup"}})
		if err := e.reps[0].SetThreshold("a", manual(3)); err != nil {
			t.Fatal(err)
		}
		e.sync()
		slow.delay.Store(int64(timeout * 32 / 100))
		var rep si.Report
		start := time.Now()
		for range 3 {
			rep = e.call(0, "a", errBoom)
		}
		if d := time.Since(start); rep.Improvement == nil || d > timeout {
			t.Fatalf("the call that crossed the threshold made %+v in %v, want a change within %v", rep.Improvement, d, timeout)
		}
		time.Sleep(timeout) // the flusher's release, within one timeout
		slow.delay.Store(0)
		ok, err := e.mem.Lease(context.Background(), "a", "another replica", time.Minute)
		if err != nil || !ok {
			t.Fatalf("another replica's Lease = %v, %v after one fleet timeout; want the lease given back", ok, err)
		}
	})
}

// TestFleetProbeClaimWithinTimeout: the call that probes a held agent
// claims the probe (a commit), then commits the end of the hold its
// success decides: both commits are of the call's one fleet time. With
// every operation taking 60 % of the timeout, the claim lands and the
// end of the hold has the 40 % left, which the fleet does not answer in:
// the call waits the timeout at most, reports ErrFleetUnavailable, and
// the agent stays held (a claim with a fleet time of its own would make
// the call wait 120 ms). With 30 %, both land within the timeout, and
// another replica runs the agent again.
func TestFleetProbeClaimWithinTimeout(t *testing.T) {
	for _, pct := range []int64{60, 30} {
		t.Run(fmt.Sprint(pct, "%"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { probeClaim(t, pct) })
		})
	}
}

func probeClaim(t *testing.T, pct int64) {
	const timeout = slowTimeout
	e, slow := slowEnv(t, 2, nil,
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}), si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	quota := func(string) error { return errQuota }
	e.callRoutes(0, "a", quota)
	e.callRoutes(0, "a", quota)
	e.sync()
	if _, err := e.reps[1].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Fatalf("replica 1 does not hold the agent: %v", err)
	}
	e.clk.Advance(time.Minute) // the probe is due
	slow.delay.Store(int64(timeout) * pct / 100)
	start := time.Now()
	rep := e.callRoutes(0, "a", func(string) error { return nil })
	if d := time.Since(start); d > timeout || !rep.Success {
		t.Fatalf("the probe: success %v (%v), waited %v on the fleet; want a success within %v", rep.Success, rep.Err, d, timeout)
	}
	slow.delay.Store(0)
	time.Sleep(timeout)
	e.clk.Advance(2 * time.Second) // the back-off, if any, is over
	e.sync()
	_, err := e.reps[1].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
	switch {
	case pct == 60 && (!errors.Is(rep.LoopErr, si.ErrFleetUnavailable) || !errors.Is(err, si.ErrCircuitOpen)):
		t.Fatalf("the end of the hold, out of fleet time: LoopErr %v, replica 1's call %v; want ErrFleetUnavailable, still held", rep.LoopErr, err)
	case pct == 30 && (rep.LoopErr != nil || err != nil):
		t.Fatalf("the end of the hold: LoopErr %v, replica 1's call %v; want it landed", rep.LoopErr, err)
	}
}

// A probe's claim that finds the call's fleet time spent does not probe:
// a replica whose first call of a held agent spent 95 % of its fleet time
// loading it fails the call fast, as when another replica holds the
// probe, rather than run a probe no other replica knows of (several
// replicas would then probe the held route at once).
func TestFleetProbeClaimOutOfTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, slow := slowEnv(t, 2, nil,
			si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}), si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
		quota := func(string) error { return errQuota }
		e.callRoutes(0, "a", quota)
		e.callRoutes(0, "a", quota) // held
		e.sync()
		e.clk.Advance(time.Minute) // the probe is due
		slow.delay.Store(int64(slowTimeout) * 95 / 100)
		ran := false
		_, err := e.reps[1].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { ran = true; return nil })
		if ran || !errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("replica 1's first call, its fleet time spent on the load: ran %v, %v; want no probe, ErrCircuitOpen", ran, err)
		}
	})
}
