package selfimprove_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

var errOverloaded = errors.New("503 Service Unavailable: the engine is currently overloaded, please try again later")

// Issue 40, item 1: a route moves on evidence that is true. The primary
// fails every 10th request; each failing call is answered by the
// fallback, and the nine calls between succeed on the primary at their
// first attempt, booked on the lock-free path. Those successes end the
// run of calls that succeeded only on the fallback, so the agent stays on
// the primary. Before, successes booked without the lock never reached
// the route rule: the fifth fallback-only success, 50 calls in, moved
// the agent to the fallback with the reason "5 calls in a row succeeded
// only on route backup", and the fallback served from then on.
func TestScatteredFailuresStayOnPrimary(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	ok, fromBackup := 0, 0
	for i := range 300 {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			clk.Advance(100 * time.Millisecond)
			switch {
			case cfg.Route == "backup":
				fromBackup++
				return nil
			case i%10 == 9: // every 10th call, the primary fails each attempt
				return errOverloaded
			}
			return nil
		})
		if rep.Success {
			ok++
		}
		clk.Advance(2 * time.Second)
	}
	if r := l.Config("a").Route; ok != 300 || r != "" && r != "primary" || fromBackup > 30 {
		t.Errorf("300 calls: %d answered, route now %q, %d answered by the fallback; want all, the primary, at most 30", ok, r, fromBackup)
	}
	for _, ev := range l.Events(si.EventFilter{AgentIDs: []string{"a"}}) {
		if ev.Change != nil && strings.Contains(ev.Change.Reason, "in a row") {
			t.Errorf("%s: %s", ev.Type, ev.Change.Reason)
		}
	}
}
