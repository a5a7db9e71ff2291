package selfimprove_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// A withdrawn model is dead whatever became of the call: here the
// fallback failed too (503). Before, the primary was marked dead only
// when the fallback answered, so every call asked the withdrawn model
// again while the fallback was failing.
func TestWithdrawnPrimaryDeadWhenTheFallbackFailsToo(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	asked := 0
	callEvery(l, clk, "a", 3, time.Second, func(route string) error {
		if route == "" {
			asked++
			return errGone
		}
		return err503
	})
	if ds := l.DeadRoutes(); len(ds) != 1 || ds[0].Route != "primary" {
		t.Fatalf("dead routes %+v, want the primary alone", ds)
	}
	if asked != 1 {
		t.Fatalf("the withdrawn primary was asked %d times in 3 calls, want once", asked)
	}
}

// A call that fell back keeps its attempts: the primary never answers
// (its attempt times out), the backup fails once with a 503 and would
// then answer. Before, the call ended with the backup's first failure,
// one of its 3 attempts unused.
func TestFallbackKeepsTheAttemptsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithFlushInterval(0),
			si.WithDefaultConfig(si.Config{Timeout: 10 * time.Second, MaxAttempts: 3}),
			si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var routes []string
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, cfg si.Config) error {
			routes = append(routes, cfg.Route)
			switch {
			case cfg.Route == "backup" && len(routes) == 2:
				return err503
			case cfg.Route != "":
				return nil
			}
			<-ctx.Done() // the primary never answers
			return ctx.Err()
		})
		if err != nil || rep.Attempts != 3 {
			t.Fatalf("routes %q, %d attempts: %v; want an answer at the third attempt", routes, rep.Attempts, err)
		}
		if routes[2] == "" {
			t.Fatalf("routes %q: the silent primary was asked again", routes)
		}
	})
}

// A nested call's "no such model" is the nested agent's: the outer
// call neither falls back for it nor marks its own route dead. Before,
// the outer agent's healthy model was marked dead for every agent for a
// day, for another agent's withdrawn model.
func TestNestedWithdrawnModelLeavesTheOuterRoute(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	if err := l.SetRoutes("inner", si.Routes{Off: true}); err != nil {
		t.Fatal(err)
	}
	inner := 0
	var outer []string
	_, err := l.ExecuteWithImprovement(context.Background(), "outer", func(ctx context.Context, cfg si.Config) error {
		outer = append(outer, cfg.Route)
		_, err := l.ExecuteWithImprovement(ctx, "inner", func(context.Context, si.Config) error {
			if inner++; inner == 1 {
				return errors.New("404 model_not_found: the model `claude-2.0` does not exist")
			}
			return nil
		})
		return err
	})
	if ds := l.DeadRoutes(); len(ds) != 0 {
		t.Fatalf("dead routes %+v after the inner agent's withdrawn model, want none", ds)
	}
	if len(outer) != 1 || outer[0] != "" || err == nil {
		t.Fatalf("outer attempts on %q (%v), want one, on its own route, failing with the inner agent's error (a permanent class: not retried)", outer, err)
	}
}

// An agent kept off the ladders runs on its own, unnamed model; its "no
// such model" marks no route dead for the others, whose ladders' default
// primary is also named "". Before, every other agent's primary was
// skipped for a day.
func TestOffLadderAgentLeavesTheDefaultPrimary(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{Fallbacks: []string{"mini"}}))
	if err := l.SetRoutes("tool", si.Routes{Off: true}); err != nil {
		t.Fatal(err)
	}
	callEvery(l, clk, "tool", 1, time.Second, func(string) error {
		return errors.New("404 model_not_found: the model `text-embedding-old` does not exist")
	})
	var route string
	callEvery(l, clk, "writer", 1, time.Second, func(r string) error { route = r; return nil })
	if ds := l.DeadRoutes(); len(ds) != 0 || route != "" {
		t.Fatalf("the writer ran on %q, dead routes %+v; want its primary, none dead", route, ds)
	}
}

// The move's reason says the last 5 calls succeeded only on the next
// route, and it is so: a call that failed on both routes ends the run.
// Before, a failed call neither counted nor ended it, and the reason said
// "the last 5 calls succeeded" over a failure.
func TestMoveReasonCountsCallsInARow(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	var ok []bool
	for i := range 11 {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			clk.Advance(10 * time.Millisecond)
			if cfg.Route == "backup" && i != 4 {
				return nil
			}
			return err503
		})
		ok = append(ok, rep.Success)
		clk.Advance(time.Minute)
		if c := rep.Improvement; c != nil {
			if !strings.Contains(c.Reason, "the last 5 calls succeeded") || i != 9 {
				t.Fatalf("call %d (outcomes %v) moved the agent: %s; want the move at the tenth, five after the failure", i+1, ok, c.Reason)
			}
			return
		}
	}
	t.Fatalf("outcomes %v: no move", ok)
}
