package selfimprove_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
)

func TestVerificationConfirmsAfterTenCalls(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	for i := range 9 {
		if rep := e.call("a", nil, time.Millisecond); rep.Confirmed != nil || rep.Rollback != nil {
			t.Fatalf("decided after %d calls: %+v", i+1, rep)
		}
	}
	rep := e.call("a", nil, time.Millisecond)
	if rep.Confirmed == nil || rep.Confirmed.State != si.ChangeConfirmed || rep.Confirmed.After.Calls != 10 || rep.Confirmed.Verdict == "" {
		t.Fatalf("10th call: %+v", rep)
	}
	// Verification ended: later calls, even bad ones, do not re-judge it.
	e.calls("a", 4, errBoom, 100*time.Millisecond)
	for _, c := range e.l.Changes("a") {
		if c.State != si.ChangeConfirmed {
			t.Errorf("change %s is %s after confirmation", c.ID, c.State)
		}
	}
	if got := e.l.Config("a"); got.Version != 2 || got.Route != "b" {
		t.Errorf("config = %+v", got)
	}
}

func TestRollbackOnConsecutiveFailures(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	for range 4 {
		if rep := e.call("a", errBoom, time.Millisecond); rep.Rollback != nil {
			t.Fatal("rolled back after fewer than 5 consecutive failures")
		}
	}
	rep := e.call("a", errBoom, time.Millisecond)
	if rep.Rollback == nil {
		t.Fatal("no rollback after 5 consecutive failures")
	}
	rb := rep.Rollback
	if rb.State != si.ChangeRolledBack || rb.To.Version != 2 || rb.From.Version != 1 || !strings.Contains(rb.Verdict, "consecutive") {
		t.Errorf("rollback = %+v", rb)
	}
	if got := e.l.Config("a"); got.Version != 1 || got.Route != "" {
		t.Errorf("config after rollback = %+v, want v1 restored", got)
	}
	if rep := e.call("a", nil, 0); rep.ConfigVersion != 1 {
		t.Errorf("next call ran under v%d", rep.ConfigVersion)
	}
	e.l.Close()
	if diff := cmp.Diff([]si.EventType{si.EventImprovementApplied, si.EventRolledBack}, e.rec.types()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestRollbackOnSuccessDropAndLatencyRise(t *testing.T) {
	seed := si.RollbackPolicy{SeedCompatible: true}
	tests := []struct {
		name     string
		policy   si.RollbackPolicy
		fails    int           // failures among the 10 verification calls
		latency  time.Duration // of each verification call
		rollback bool
	}{
		// Before: 2 calls, both failed, 1ms each. Success rate 0%: no drop possible.
		{"latency exactly +20%", seed, 0, 1200 * time.Microsecond, false}, // rise 0.2ms, under the floor
		{"latency +300%", seed, 0, 4 * time.Millisecond, true},
		{"latency +100% and 1ms", seed, 0, 2 * time.Millisecond, true},
		{"all fine", seed, 0, time.Millisecond, false},
		// The default policy keeps a change that turned failures into
		// slower successes: success rose 100 points.
		{"default: latency +300% with success 0% → 100%", si.RollbackPolicy{MinBeforeCalls: -1}, 0, 4 * time.Millisecond, false},
		{"default: latency +100% with success 0% → 100%", si.RollbackPolicy{MinBeforeCalls: -1}, 0, 2 * time.Millisecond, false},
		// Success rose only 10 points (0% → 10%), not more: the latency
		// rule applies.
		// No call succeeded before: there is no latency of successes to
		// compare with.
		{"fixed: latency +300% with success 0% → 10%", si.RollbackPolicy{Method: si.MethodFixed, MinBeforeCalls: -1, MaxConsecutiveFailures: -1}, 9, 4 * time.Millisecond, false},
		{"fixed: latency +300% with success 0% → 20%", si.RollbackPolicy{Method: si.MethodFixed, MinBeforeCalls: -1, MaxConsecutiveFailures: -1}, 8, 4 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
			e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(tt.policy))
			applyTweak(t, e, "a")
			var last si.Report
			for i := range 10 {
				var err error
				if i < tt.fails {
					err = errBoom
				}
				last = e.call("a", err, tt.latency)
			}
			if got := last.Rollback != nil; got != tt.rollback {
				t.Fatalf("rollback = %v, want %v; report %+v", got, tt.rollback, last)
			}
		})
	}
}

func TestRollbackOnSuccessDrop(t *testing.T) {
	// Before the change: 10 calls in the window, 8 succeeded (80%); the
	// fault began with the 9th. The seed's rule compares with the window,
	// the default policy with the 2 calls since the fault began (0%).
	seed := si.RollbackPolicy{SeedCompatible: true}
	tests := []struct {
		policy   si.RollbackPolicy
		fails    int // of the 10 verification calls, never consecutive
		rollback bool
	}{
		{seed, 1, false}, // 90%: better
		{seed, 3, false}, // 70%: exactly 10 points lower, kept
		{seed, 4, true},  // 60%: 20 points lower
		// 60% is better than 0%; the backstop, which would confirm at 60
		// calls, is off so that the 10th call decides.
		{si.RollbackPolicy{Method: si.MethodFixed, MinBeforeCalls: -1, BackstopCalls: -1}, 4, false},
		{si.RollbackPolicy{Method: si.MethodFixed, MinBeforeCalls: -1, BackstopCalls: -1}, 5, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.policy.SeedCompatible, tt.fails), func(t *testing.T) {
			strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
			e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(tt.policy))
			if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Hour}); err != nil {
				t.Fatal(err)
			}
			e.calls("a", 8, nil, time.Millisecond)
			e.call("a", errBoom, time.Millisecond)
			rep := e.call("a", errBoom, time.Millisecond)
			wantBefore := 2 // the calls since the fault began
			if tt.policy.SeedCompatible {
				wantBefore = 10 // the window
			}
			if rep.Improvement == nil || rep.Improvement.Before.Calls != wantBefore || rep.Improvement.Before.Failures != 2 ||
				rep.Improvement.Window == nil || rep.Improvement.Window.Calls != 10 {
				t.Fatalf("improvement = %+v", rep.Improvement)
			}
			var last si.Report
			for i := range 10 {
				var err error
				if i%2 == 0 && i/2 < tt.fails {
					err = errBoom
				}
				last = e.call("a", err, time.Millisecond)
			}
			if (last.Rollback != nil) != tt.rollback || (last.Confirmed != nil) == tt.rollback {
				t.Fatalf("10th call: rollback %v, confirmed %v; want rollback %v (%+v)", last.Rollback != nil, last.Confirmed != nil, tt.rollback, last.Rollback)
			}
		})
	}
}

func TestRejectedTweakNeverReapplied(t *testing.T) {
	bad := si.Config{Route: "bad"}
	strat := &tweakStrategy{tweaks: []si.Config{bad, bad, bad}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	e.calls("a", 5, errBoom, 0) // rolled back
	e.clk.Advance(13 * time.Hour)
	e.call("a", errBoom, 0)
	rep := e.call("a", errBoom, 0)
	if !rep.ImprovementTriggered || rep.Improvement != nil || !errors.Is(rep.LoopErr, si.ErrTweakRejected) {
		t.Fatalf("rejected tweak: report %+v", rep)
	}
	if got := strat.seen[1].Rejected; len(got) != 1 || got[0].Config.Route != "bad" {
		t.Errorf("Analysis.Rejected = %+v", got)
	}
	if m := e.l.Metrics(); m.RejectedTweaks != 1 {
		t.Errorf("RejectedTweaks = %d", m.RejectedTweaks)
	}
	// An operator clears the list: the tweak may be tried again.
	if err := e.l.ClearRejected("a"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(13 * time.Hour)
	// The failures since the rollback still count: one more triggers.
	if rep := e.call("a", errBoom, 0); rep.Improvement == nil {
		t.Fatalf("after ClearRejected: %+v", rep)
	} else if rep.Improvement.To.Version != 3 {
		t.Errorf("re-applied as v%d, want v3 (versions are never reused)", rep.Improvement.To.Version)
	}
}

func TestFailuresBeforeChangeDoNotCount(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}, {Route: "c"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: -1, MaxLatencyRise: -1, MinBeforeCalls: -1}))
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: 72 * time.Hour, Cooldown: 12 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	applyTweak(t, e, "a")
	e.calls("a", 10, nil, 0) // confirmed
	e.clk.Advance(13 * time.Hour)
	// The two failures before the change are in the 72h window but do not
	// count: one new failure is not enough.
	if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
		t.Fatal("failures from before the change counted toward the trigger")
	}
	if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
		t.Fatal("two new failures did not trigger")
	}
}

func TestFailuresOutsideWindowDoNotCount(t *testing.T) {
	e := newEnv(t)
	e.call("a", errBoom, 0)
	e.clk.Advance(72*time.Hour + time.Second)
	if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
		t.Fatal("a failure older than the 72h window counted")
	}
	e.clk.Advance(71 * time.Hour)
	if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
		t.Fatal("two failures within 72h did not trigger")
	}
}

func TestInFlightCallsCreditedToTheirVersion(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat))
	release, done := e.heldCall("a", errBoom)
	applyTweak(t, e, "a")
	// Four failures under v2, then the slow v1 call fails: it must not be
	// the fifth consecutive failure of v2.
	e.calls("a", 4, errBoom, 0)
	release()
	if rep := <-done; rep.ConfigVersion != 1 || rep.Rollback != nil {
		t.Fatalf("in-flight v1 call: %+v", rep)
	}
	if got := e.l.Changes("a"); len(got) != 1 || got[0].After.Calls != 4 || got[0].State != si.ChangeVerifying {
		t.Fatalf("changes = %+v", got)
	}
	if rep := e.call("a", errBoom, 0); rep.Rollback == nil {
		t.Fatal("fifth v2 failure did not roll back")
	}
}
