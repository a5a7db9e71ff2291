package selfimprove_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
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
		const timeout = 100 * time.Millisecond
		clk := fakeclock.New(t0)
		mem := fleettest.New(clk)
		slow := &slowFleet{Fleet: mem}
		strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
		e := &fleetEnv{t: t, clk: clk, fleet: slow, mem: mem, strat: strat, opts: []si.Option{si.WithFleetTimeout(timeout)}}
		e.add()
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
		ok, err := mem.Lease(context.Background(), "a", "another replica", time.Minute)
		if err != nil || !ok {
			t.Fatalf("another replica's Lease = %v, %v after one fleet timeout; want the lease given back", ok, err)
		}
	})
}
