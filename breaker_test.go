package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
)

func TestCircuitBreakerTransitions(t *testing.T) {
	e := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: time.Minute, CoolOffCalls: -1}))
	ran := 0
	call := func(err error) (si.Report, error) {
		return e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			ran++
			e.clk.Advance(time.Millisecond)
			return err
		})
	}
	// Closed: 2 failures and a success, then 3 failures open it.
	call(errBoom)
	call(errBoom)
	call(nil)
	for range 3 {
		if _, err := call(errBoom); !errors.Is(err, errBoom) {
			t.Fatalf("closed circuit returned %v", err)
		}
	}
	// Open: calls fail fast, fn does not run, nothing is counted.
	ran = 0
	calls := e.l.Stats("a").Calls
	for range 5 {
		rep, err := call(nil)
		if !errors.Is(err, si.ErrCircuitOpen) || rep.Attempts != 0 || rep.Err != si.ErrCircuitOpen {
			t.Fatalf("open circuit: %+v, %v", rep, err)
		}
	}
	if ran != 0 || e.l.Stats("a").Calls != calls {
		t.Fatalf("fn ran %d times, calls %d → %d", ran, calls, e.l.Stats("a").Calls)
	}
	// Half-open after the cool-off: a failed probe opens it again.
	e.clk.Advance(time.Minute)
	if _, err := call(errBoom); !errors.Is(err, errBoom) {
		t.Fatalf("probe returned %v", err)
	}
	if _, err := call(nil); !errors.Is(err, si.ErrCircuitOpen) {
		t.Fatalf("after a failed probe: %v", err)
	}
	// A good probe closes it.
	e.clk.Advance(time.Minute)
	if _, err := call(nil); err != nil {
		t.Fatalf("probe returned %v", err)
	}
	if _, err := call(nil); err != nil {
		t.Fatalf("closed again: %v", err)
	}
	e.l.Close()
	var types []si.EventType
	for _, ev := range e.rec.types() {
		if ev == si.EventCircuitOpened || ev == si.EventCircuitClosed {
			types = append(types, ev)
		}
	}
	want := []si.EventType{si.EventCircuitOpened, si.EventCircuitOpened, si.EventCircuitClosed}
	if len(types) != len(want) || types[0] != want[0] || types[1] != want[1] || types[2] != want[2] {
		t.Errorf("events %v, want %v", types, want)
	}
}

func TestCircuitBreakerOneProbeAtATime(t *testing.T) {
	e := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 1, CoolOff: time.Minute, CoolOffCalls: -1}))
	e.call("a", errBoom, time.Millisecond)
	e.clk.Advance(time.Minute)
	release, done := e.heldCall("a", nil) // the probe
	if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Errorf("a second call during the probe: %v, want ErrCircuitOpen", err)
	}
	release()
	if rep := <-done; rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); err != nil {
		t.Errorf("after the probe: %v", err)
	}
}

func TestCircuitBreakerSurvivesRestartAndWaitsForVerification(t *testing.T) {
	opt := si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: time.Hour, CoolOffCalls: -1})
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, opt, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
	// The 2nd failure applies a change: failures under verification roll
	// it back (5 in a row), and only then count toward the breaker.
	for range 2 {
		e.call("a", errBoom, time.Millisecond)
	}
	for i := range 5 {
		if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return errBoom }); errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("circuit opened during verification, at call %d", i)
		}
	}
	for range 3 {
		e.call("a", errBoom, time.Millisecond)
	}
	e.l.Close()
	e.open(opt)
	if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Errorf("after a restart: %v, want ErrCircuitOpen", err)
	}
}

func TestBudgets(t *testing.T) {
	e := newEnv(t, si.WithDefaultConfig(si.Config{MaxAttempts: 5, Backoff: time.Second}))
	run := func(b *si.Budget, cost float64) (si.Report, int) {
		n := 0
		ctx := context.Background()
		if b != nil {
			ctx = si.WithBudget(ctx, b)
		}
		rep, _ := e.l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, _ si.Config) error {
			n++
			si.AddCost(ctx, cost)
			return errBoom
		})
		return rep, n
	}
	if rep, n := run(nil, 1); n != 5 || rep.BudgetExhausted {
		t.Errorf("no budget: %d attempts, exhausted %v", n, rep.BudgetExhausted)
	}
	b := &si.Budget{Attempts: 2}
	if rep, n := run(b, 1); n != 2 || !rep.BudgetExhausted || rep.Attempts != 2 {
		t.Errorf("2-attempt budget: %d attempts, report %+v", n, rep)
	}
	b = &si.Budget{Cost: 2.5}
	rep, n := run(b, 1)
	if spent, ex := b.Spent(); n != 3 || !rep.BudgetExhausted || spent != 3 || !ex {
		t.Errorf("cost budget 2.5 at 1 an attempt: %d attempts, spent %v, exhausted %v", n, spent, ex)
	}
	// The budget never raises the config's MaxAttempts.
	if rep, n := run(&si.Budget{Attempts: 10}, 0); n != 5 || rep.BudgetExhausted {
		t.Errorf("budget above MaxAttempts: %d attempts, exhausted %v", n, rep.BudgetExhausted)
	}
	si.AddCost(context.Background(), 1) // no budget: nothing happens
}

func TestAttemptInfo(t *testing.T) {
	e := newEnv(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	// Remember a rate limit and its confirmed fix... here just its cluster.
	e.fail("other", "openai: 429 Too Many Requests: rate limit reached for gpt-4o")
	var seen []si.Attempt
	rep, _ := e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		a, ok := si.AttemptInfo(ctx)
		if ok != (a.Number > 1) {
			t.Errorf("attempt %d: ok = %v", a.Number, ok)
		}
		seen = append(seen, a)
		return errors.New("openai: 429 Too Many Requests: rate limit reached for gpt-4o-mini")
	})
	if rep.Attempts != 3 || len(seen) != 3 {
		t.Fatalf("report %+v, %d attempts seen", rep, len(seen))
	}
	if seen[0].Number != 1 || seen[1].Number != 2 || seen[2].Number != 3 {
		t.Errorf("numbers %d %d %d", seen[0].Number, seen[1].Number, seen[2].Number)
	}
	a := seen[1]
	if a.LastClass != failure.ClassRateLimit || a.LastErr == nil || len(a.Memories) == 0 || a.Memories[0].Class != failure.ClassRateLimit {
		t.Errorf("second attempt's info = %+v", a)
	}
}

// At one call a minute, a 30-second cool-off would make every call a
// probe: the cool-off scales with the call rate (10 intervals by default),
// so the circuit fails fast for 10 minutes, then probes once.
func TestCircuitBreakerScalesWithTheCallRate(t *testing.T) {
	e := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: 30 * time.Second}))
	ran := 0
	call := func(err error) error {
		_, got := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			ran++
			return err
		})
		e.clk.Advance(time.Minute)
		return got
	}
	for range 30 { // half an hour of calls, one a minute
		call(nil)
	}
	for range 3 {
		call(errBoom)
	}
	// Open: the next 9 calls (9 minutes) fail fast; the 10th minute's
	// call is the probe.
	ran = 0
	for i := range 9 {
		if err := call(errBoom); !errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("call %d after the circuit opened: %v, want ErrCircuitOpen", i+1, err)
		}
	}
	if err := call(errBoom); !errors.Is(err, errBoom) || ran != 1 {
		t.Fatalf("the probe: %v, fn ran %d times", err, ran)
	}
	// With the cool-off alone (CoolOffCalls -1), every call is a probe.
	e2 := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: 30 * time.Second, CoolOffCalls: -1}))
	probes := 0
	for i := range 40 {
		_, err := e2.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			if i < 30 {
				return nil
			}
			probes++
			return errBoom
		})
		if i >= 33 && errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("call %d failed fast with the cool-off alone", i)
		}
		e2.clk.Advance(time.Minute)
	}
	if probes != 10 {
		t.Fatalf("fn ran %d times in the last 10 minutes, want 10", probes)
	}
}
