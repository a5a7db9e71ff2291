package selfimprove_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

var errBadRequest = errors.New("400 invalid_request_error: messages: unknown field")

// Issue 26, item 4: an agent's view says what the loop will do next, and
// when: watching with the next route named, held for an account-wide
// cause until its next probe, away from its primary until the probe that
// may return it, cooling down until a time; and the dead routes.
func TestViewTellsTheNextStep(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk)
	view := func(id string) si.AgentView {
		t.Helper()
		v, ok := l.View(id)
		if !ok {
			t.Fatalf("no agent %q", id)
		}
		return v
	}
	callEvery(l, clk, "w", 5, time.Second, func(string) error { return nil })
	if v := view("w"); !strings.HasPrefix(v.Next, `watching; next: route "backup"`) || !v.NextAt.IsZero() {
		t.Errorf("healthy agent: next %q at %v", v.Next, v.NextAt)
	}
	callEvery(l, clk, "q", 3, time.Second, func(string) error { return errQuota })
	if v := view("q"); v.Held != failure.ClassQuota || !strings.HasPrefix(v.Next, "held for quota") || !v.NextAt.After(clk.Now()) {
		t.Errorf("held agent: held %q, next %q at %v (now %v)", v.Held, v.Next, v.NextAt, clk.Now())
	}
	start := clk.Now()
	callEvery(l, clk, "o", 40, 10*time.Second, func(r string) error {
		if (r == "" || r == "primary") && clk.Now().Before(start.Add(time.Hour)) {
			return err503
		}
		return nil
	})
	if v := view("o"); v.Home != "primary" || v.Next != `probe route "primary" to return to it` || v.NextAt.Before(clk.Now()) {
		t.Errorf("agent away from its primary: home %q, next %q at %v", v.Home, v.Next, v.NextAt)
	}
	callEvery(l, clk, "g", 3, time.Second, func(r string) error {
		if r == "" || r == "primary" {
			return errGone
		}
		return nil
	})
	callEvery(l, clk, "c", 30, 10*time.Second, func(string) error { return errBadRequest })
	v := view("c")
	if !strings.HasPrefix(v.Next, `cooling down; next: route "backup"`) || !v.NextAt.After(clk.Now()) {
		t.Errorf("agent cooling down: next %q at %v (now %v)", v.Next, v.NextAt, clk.Now())
	}
	if len(v.DeadRoutes) != 1 || v.DeadRoutes[0].Route != "primary" || !strings.Contains(v.DeadRoutes[0].Reason, "model_not_found") ||
		v.DeadRoutes[0].Until.Sub(clk.Now()) < 23*time.Hour {
		t.Errorf("dead routes %+v: want the primary, for a day (ProbePolicy.DeadFor)", v.DeadRoutes)
	}
}
