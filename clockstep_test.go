package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"

	si "github.com/self-improving-loop/selfimprove"
)

// TestCircuitEndsAfterTheClockStepsBack: a wall clock stepped back (an NTP
// step, a VM's clock set right) while a circuit is open does not keep it
// open for the step's length: the next call is the probe, as when the
// cool-off ends; a failed probe opens the circuit for a cool-off from the
// new time, and the probe after it closes it.
func TestCircuitEndsAfterTheClockStepsBack(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, 24 * time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			e := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: time.Minute, CoolOffCalls: -1}))
			e.calls("a", 3, errBoom, time.Millisecond)
			ran := 0
			ok := func(context.Context, si.Config) error { ran++; return nil }
			if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", ok); !errors.Is(err, si.ErrCircuitOpen) {
				t.Fatalf("after 3 failures: %v, want ErrCircuitOpen", err)
			}
			e.clk.Advance(-step)
			if v, _ := e.l.View("a"); v.Circuit != si.CircuitHalfOpen {
				t.Errorf("after a step back of %v: View says the circuit is %v, want half-open", step, v.Circuit)
			}
			e.call("a", errBoom, time.Millisecond) // the probe fails: open for a minute from now
			if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", ok); !errors.Is(err, si.ErrCircuitOpen) || ran != 0 {
				t.Fatalf("after the failed probe: %v (fn ran %d times), want ErrCircuitOpen", err, ran)
			}
			e.clk.Advance(time.Minute)
			if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", ok); err != nil || ran != 1 {
				t.Fatalf("a cool-off after the failed probe: %v (fn ran %d times), want the probe to run and succeed", err, ran)
			}
			if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", ok); err != nil || ran != 2 {
				t.Fatalf("after the probe: %v (fn ran %d times), want the circuit closed", err, ran)
			}
		})
	}
}

// TestHoldProbesAfterTheClockStepsBack: an agent held for its account's
// quota probes at its next call after the clock stepped back a day, not
// a day and a probe interval later.
func TestHoldProbesAfterTheClockStepsBack(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk)
	sent, quota := 0, true
	fn := quotaFn(&sent, &quota)
	for range 2 {
		l.ExecuteWithImprovement(context.Background(), "a", fn)
	}
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", fn); !errors.Is(err, si.ErrCircuitOpen) {
		t.Fatalf("held call: %v", err)
	}
	quota = false
	clk.Advance(-24 * time.Hour)
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", fn); err != nil || sent != 3 {
		t.Fatalf("after a step back of a day: %v (%d requests sent), want the probe to run and release the hold", err, sent)
	}
}
