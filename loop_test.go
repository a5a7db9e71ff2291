package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
)

func TestSuccessReport(t *testing.T) {
	e := newEnv(t)
	rep := e.call("a", nil, 5*time.Millisecond)
	want := si.Report{Success: true, Duration: 5 * time.Millisecond, Attempts: 1, ConfigVersion: 1}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	s := e.l.Stats("a")
	if s.Calls != 1 || s.Failures != 0 || s.SuccessRate != 1 || s.AvgLatency != 5*time.Millisecond || s.Profile != si.ProfileLow {
		t.Errorf("stats = %+v", s)
	}
}

func TestErrorReturnedUnchanged(t *testing.T) {
	e := newEnv(t)
	wrapped := fmt.Errorf("upstream: %w", errBoom)
	rep, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return wrapped })
	if err != wrapped || rep.Err != wrapped || !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, rep.Err = %v; want the very error fn returned", err, rep.Err)
	}
	if rep.Success || rep.Ignored {
		t.Errorf("report = %+v, want a counted failure", rep)
	}
	if s := e.l.Stats("a"); s.Failures != 1 || s.ConsecutiveFailures != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestExecuteGeneric(t *testing.T) {
	e := newEnv(t)
	v, rep, err := si.Execute(context.Background(), e.l, "a", func(_ context.Context, c si.Config) (string, error) {
		return fmt.Sprintf("v%d", c.Version), nil
	})
	if v != "v1" || err != nil || !rep.Success {
		t.Fatalf("Execute = %q, %+v, %v", v, rep, err)
	}
	_, _, err = si.Execute(context.Background(), e.l, "a", func(context.Context, si.Config) (int, error) { return 0, errBoom })
	if !errors.Is(err, errBoom) {
		t.Fatalf("err = %v", err)
	}
}

func TestTriggerAppliesTweakAndEnforcesIt(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Timeout: 2 * time.Second, MaxAttempts: 3, Route: "backup"}}}
	e := newEnv(t, si.WithStrategy(strat))
	rep := e.call("a", errBoom, time.Millisecond)
	if rep.ImprovementTriggered || strat.count() != 0 {
		t.Fatalf("first failure of a low-frequency agent triggered: %+v", rep)
	}
	rep = e.call("a", errBoom, time.Millisecond)
	if !rep.ImprovementTriggered || rep.Improvement == nil || strat.count() != 1 {
		t.Fatalf("second failure did not apply a tweak: %+v (strategy runs %d)", rep, strat.count())
	}
	ch := rep.Improvement
	if ch.From.Version != 1 || ch.To.Version != 2 || ch.State != si.ChangeVerifying || ch.Reason != "test tweak" || ch.ID == "" {
		t.Errorf("change = %+v", ch)
	}
	if ch.Before.Calls != 2 || ch.Before.Failures != 2 {
		t.Errorf("before stats = %+v, want the window's 2 failed calls", ch.Before)
	}
	if rep.ConfigVersion != 1 {
		t.Errorf("the triggering call ran under v%d, want v1", rep.ConfigVersion)
	}
	a := strat.seen[0]
	if a.AgentID != "a" || a.Config.Version != 1 || a.Stats.Failures != 2 || len(a.Failures) != 2 || a.Failures[0].Err != "boom" {
		t.Errorf("analysis = %+v", a)
	}
	// The next call runs under v2 and the loop enforces MaxAttempts 3.
	attempts := 0
	var seen si.Config
	rep, _ = e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
		attempts++
		seen = c
		if _, ok := ctx.Deadline(); !ok {
			t.Error("attempt context has no deadline although Timeout is set")
		}
		if attempts < 3 {
			return errBoom
		}
		return nil
	})
	if !rep.Success || rep.Attempts != 3 || attempts != 3 || rep.ConfigVersion != 2 {
		t.Errorf("report = %+v, attempts = %d", rep, attempts)
	}
	want := si.Config{Version: 2, Timeout: 2 * time.Second, MaxAttempts: 3, Route: "backup"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("fn saw config (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, e.l.Config("a")); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}
	e.l.Close()
	if diff := cmp.Diff([]si.EventType{si.EventImprovementApplied}, e.rec.types()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestNoStrategyTriggersAndCoolsDown(t *testing.T) {
	e := newEnv(t) // no strategy
	e.call("a", errBoom, 0)
	rep := e.call("a", errBoom, 0)
	if !rep.ImprovementTriggered || rep.Improvement != nil {
		t.Fatalf("report = %+v, want triggered with nothing applied", rep)
	}
	if e.l.Config("a").Version != 1 {
		t.Errorf("config changed without a strategy")
	}
	// Low profile: cooldown 12h. Failures during it do not trigger.
	e.clk.Advance(12*time.Hour - time.Second)
	if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
		t.Fatal("triggered during cooldown")
	}
	e.clk.Advance(time.Second)
	if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
		t.Fatal("did not trigger when the cooldown ended")
	}
}

func TestNilProposalStartsCooldown(t *testing.T) {
	strat := &tweakStrategy{} // always proposes nothing
	e := newEnv(t, si.WithStrategy(strat))
	e.calls("a", 20, errBoom, 0)
	if strat.count() != 1 {
		t.Fatalf("strategy ran %d times for 20 failures in one cooldown, want 1", strat.count())
	}
}

func TestSingleFlight(t *testing.T) {
	release := make(chan struct{})
	var runs sync.WaitGroup
	runs.Add(1)
	var mu sync.Mutex
	n := 0
	strat := si.StrategyFunc(func(ctx context.Context, a si.Analysis) (*si.Tweak, error) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			runs.Done()
		}
		<-release
		return nil, nil
	})
	e := newEnv(t, si.WithStrategy(strat))
	e.call("a", errBoom, 0)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.call("a", errBoom, 0)
		}()
	}
	runs.Wait()
	close(release)
	wg.Wait()
	if n != 1 {
		t.Fatalf("strategy ran %d times, want 1", n)
	}
}

// applyTweak drives agent id of e to a verified change to c, returning the
// change.
func applyTweak(t *testing.T, e *env, id string) *si.Change {
	t.Helper()
	e.call(id, errBoom, time.Millisecond)
	rep := e.call(id, errBoom, time.Millisecond)
	if rep.Improvement == nil {
		t.Fatalf("no improvement: %+v", rep)
	}
	return rep.Improvement
}

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

func TestCallerCancellationIsIgnored(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		rep, err := e.l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, _ si.Config) error { return ctx.Err() })
		if !errors.Is(err, context.Canceled) || !rep.Ignored || rep.Success || rep.ImprovementTriggered {
			t.Fatalf("report = %+v, err = %v", rep, err)
		}
	}
	if s := e.l.Stats("a"); s.Calls != 0 || s.Failures != 0 || s.Ignored != 5 {
		t.Errorf("stats = %+v, want 5 ignored and nothing counted", s)
	}
}

func TestPanicRecordedAndRepanicked(t *testing.T) {
	e := newEnv(t)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v, want the original panic value", r)
			}
		}()
		e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { panic("kaboom") })
		t.Error("panic swallowed")
	}()
	if s := e.l.Stats("a"); s.Failures != 1 {
		t.Errorf("stats = %+v, want the panic counted as a failure", s)
	}
}

func TestStrategyFailuresNeverFailTheCall(t *testing.T) {
	tests := []struct {
		name  string
		strat si.Strategy
		want  error
	}{
		{"error", si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) { return nil, errBoom }), errBoom},
		{"panic", si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) { panic("strategy bug") }), si.ErrStrategyPanic},
		{"invalid tweak", si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) {
			return &si.Tweak{Config: si.Config{Timeout: -1}}, nil
		}), si.ErrTweakRejected},
		{"same config", si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
			return &si.Tweak{Config: a.Config}, nil
		}), si.ErrTweakRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, si.WithStrategy(tt.strat))
			e.call("a", errBoom, 0)
			rep := e.call("a", errBoom, 0) // call checks fn's error is returned unchanged
			if !rep.ImprovementTriggered || rep.Improvement != nil || !errors.Is(rep.LoopErr, tt.want) {
				t.Fatalf("report = %+v, LoopErr %v", rep, rep.LoopErr)
			}
			if e.l.Config("a").Version != 1 {
				t.Error("config changed")
			}
		})
	}
}

func TestNotifierFailuresNeverFailTheCall(t *testing.T) {
	for name, n := range map[string]si.Notifier{
		"error": si.NotifierFunc(func(context.Context, si.Event) error { return errBoom }),
		"panic": si.NotifierFunc(func(context.Context, si.Event) error { panic("notifier bug") }),
	} {
		t.Run(name, func(t *testing.T) {
			strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
			e := newEnv(t, si.WithStrategy(strat), si.WithNotifier(n))
			if ch := applyTweak(t, e, "a"); ch.To.Version != 2 {
				t.Fatal("not applied")
			}
			if err := e.l.Close(); err != nil {
				t.Fatal(err)
			}
			if m := e.l.Metrics(); m.NotifyErrors != 1 || m.Improvements != 1 {
				t.Errorf("metrics = %+v", m)
			}
		})
	}
}

func TestBlockedNotifierNeverBlocksTheCall(t *testing.T) {
	block := make(chan struct{})
	n := si.NotifierFunc(func(ctx context.Context, _ si.Event) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithNotifier(n), si.WithNotifyOptions(si.NotifyOptions{Timeout: time.Hour}))
	applyTweak(t, e, "a") // returns although the notifier is stuck
	e.calls("a", 10, nil, 0)
	close(block)
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	if m := e.l.Metrics(); m.Notified+m.NotifyErrors != 2 {
		t.Errorf("metrics = %+v, want both events handed to the notifier", m)
	}
}

func TestChangeIDsUnique(t *testing.T) {
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		return &si.Tweak{Config: si.Config{Route: fmt.Sprint(a.Config.Version)}}, nil
	})
	e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{Method: si.MethodFixed, MinCalls: 1, MinBeforeCalls: -1, BackstopCalls: -1}))
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	applied := 0
	for range 200 { // the clock never moves: every change in the same millisecond
		if c := e.call("a", errBoom, 0).Improvement; c != nil {
			applied++
			ids[c.ID] = true
		}
	}
	if applied < 50 || len(ids) != applied {
		t.Fatalf("%d changes applied in one instant, %d distinct IDs", applied, len(ids))
	}
}

func TestSetConfigSupersedesVerification(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	if err := e.l.SetConfig("a", si.Config{Version: 99, Route: "ops", Params: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	got := e.l.Config("a")
	if got.Version != 3 || got.Route != "ops" || got.Params["k"] != "v" {
		t.Errorf("config = %+v, want v3 (the next version)", got)
	}
	got.Params["k"] = "changed by caller"
	if e.l.Config("a").Params["k"] != "v" {
		t.Error("Config returned the loop's own Params map")
	}
	ch := e.l.Changes("a")
	if len(ch) != 1 || ch[0].State != si.ChangeSuperseded {
		t.Fatalf("changes = %+v", ch)
	}
	if err := e.l.SetConfig("a", si.Config{MaxAttempts: -1}); !errors.Is(err, si.ErrInvalidConfig) {
		t.Errorf("SetConfig invalid = %v", err)
	}
}

func TestClosedLoopStillRunsTheCall(t *testing.T) {
	e := newEnv(t)
	e.call("a", nil, 0)
	e.l.Close()
	ran := false
	rep, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { ran = true; return errBoom })
	if !ran || !errors.Is(err, errBoom) || !errors.Is(rep.LoopErr, si.ErrClosed) {
		t.Fatalf("ran=%v err=%v rep=%+v", ran, err, rep)
	}
	if err := e.l.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestSuccessPathAllocatesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fn := func(context.Context, si.Config) error { return nil }
	e.l.ExecuteWithImprovement(ctx, "a", fn)
	if n := testing.AllocsPerRun(1000, func() { e.l.ExecuteWithImprovement(ctx, "a", fn) }); n != 0 {
		t.Fatalf("success path allocates %v times per call", n)
	}
	// A failure that does not trigger (cooldown) allocates nothing either.
	e.call("b", errBoom, 0)
	e.call("b", errBoom, 0)
	fail := func(context.Context, si.Config) error { return errBoom }
	if n := testing.AllocsPerRun(1000, func() { e.l.ExecuteWithImprovement(ctx, "b", fail) }); n != 0 {
		t.Fatalf("non-triggering failure allocates %v times per call", n)
	}
}

// An error whose methods panic never fails the call: the loop records it.
func TestErrorMethodsThatPanic(t *testing.T) {
	e := newEnv(t)
	rep := e.call("a", hostileerr.BadUnwrap{}, 0)
	if rep.Success || e.l.Stats("a").Failures != 1 {
		t.Fatalf("report %+v", rep)
	}
	if cs := e.l.Clusters("a"); len(cs) != 1 || cs[0].Class != failure.ClassOther {
		t.Fatalf("clusters %+v", cs)
	}
}
