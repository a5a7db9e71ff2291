package selfimprove_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestGoexitInTheProbe: fn that ends its goroutine with runtime.Goexit
// (t.FailNow, t.SkipNow, require.NoError inside fn in a test) while it is
// the half-open circuit's probe is booked as a failed call, and the agent
// gets its next probe after the cool-off. Before, the probe stayed
// claimed: every later call failed fast with ErrCircuitOpen, for good.
func TestGoexitInTheProbe(t *testing.T) {
	e := newEnv(t, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 1, CoolOff: time.Minute, CoolOffCalls: -1}))
	e.call("a", errBoom, time.Millisecond) // opens the circuit
	if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Fatalf("circuit not open: %v", err)
	}
	e.clk.Advance(time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	if v, _ := e.l.View("a"); v.Stats.Calls != 2 || v.Stats.Failures != 2 {
		t.Errorf("after the probe that called Goexit: %d calls, %d failures; want 2 and 2", v.Stats.Calls, v.Stats.Failures)
	}
	for i := range 3 {
		e.clk.Advance(time.Hour)
		ran := false
		_, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { ran = true; return nil })
		if !ran {
			t.Fatalf("call %d, %v after the cool-off: fn did not run: %v", i+1, time.Duration(i+1)*time.Hour, err)
		}
	}
}
