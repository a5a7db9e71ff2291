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
	want := si.Report{Success: true, Duration: 5 * time.Millisecond, Attempts: 1, ConfigVersion: 1, Version: 1, ID: rep.ID}
	if rep.ID == 0 {
		t.Error("the report carries no call ID")
	}
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
	if err := e.l.SetConfig("a", si.Config{Version: 99, Route: "ops"}); !errors.Is(err, si.ErrInvalidConfig) || !strings.Contains(err.Error(), "config.version") {
		t.Fatalf("SetConfig with a version the caller made up = %v, want ErrInvalidConfig naming config.version", err)
	}
	// A config read, edited and set again keeps its version: accepted.
	cfg := e.l.Config("a")
	cfg.Route, cfg.Params = "ops", map[string]string{"k": "v"}
	if err := e.l.SetConfig("a", cfg); err != nil {
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
	// Nor one whose signature is longer than the 32 bytes a conversion
	// may keep on the stack: the signature is never copied.
	long := errors.New("upstream gateway refused the request: connection reset by peer while reading the response")
	e.call("c", long, 0)
	e.call("c", long, 0)
	failLong := func(context.Context, si.Config) error { return long }
	if n := testing.AllocsPerRun(1000, func() { e.l.ExecuteWithImprovement(ctx, "c", failLong) }); n != 0 {
		t.Fatalf("non-triggering failure with a long signature allocates %v times per call", n)
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
