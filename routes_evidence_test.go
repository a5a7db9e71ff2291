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

// Issue 40, item 7: a withdrawn model is dead whatever became of the
// call that found it, and no call of any agent asks it again until it
// is probed back. With MaxAttempts 2, agent a's call gets 404
// model_not_found from the primary and its answer from the backup: the
// primary is dead for the Loop. Agent b's calls then go straight to the
// backup, and b moves there. Before, DeadRoutes stayed empty (the call
// succeeded), and b's calls kept asking the withdrawn primary.
func TestWithdrawnModelDeadForEveryAgent(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	asked := map[string]int{}
	up := func(route string) error {
		if route == "" || route == "primary" {
			asked["primary"]++
			return errGone
		}
		asked[route]++
		return nil
	}
	if ok := callEvery(l, clk, "a", 1, time.Second, up); ok != 1 {
		t.Fatalf("a's call failed")
	}
	if dead := l.DeadRoutes(); len(dead) != 1 || dead[0].Route != "primary" {
		t.Fatalf("dead routes %+v after a 404 model_not_found answered by the backup; want the primary", dead)
	}
	before := asked["primary"]
	if ok := callEvery(l, clk, "b", 10, time.Second, up); ok != 10 {
		t.Errorf("b: %d of 10 calls answered", ok)
	}
	if n := asked["primary"] - before; n != 0 {
		t.Errorf("b asked the withdrawn primary %d times, want never", n)
	}
	if r := l.Config("b").Route; r != "backup" {
		t.Errorf("b's route %q, want backup", r)
	}
}
