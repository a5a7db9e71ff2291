package selfimprove_test

import (
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// A withdrawn model, reinstated, is returned to: the agent moves to the
// fallback at once, stays away from the dead primary without sending it
// requests, probes it once its dead time (DeadFor, 24 hours by default)
// has passed, and returns to it when it answers again. Here the primary
// is still withdrawn at the first probe (a day in), which marks it dead
// for another day, and answers again by the second. Before, a move off a
// dead route was never undone: the agent stayed on the fallback for good.
func TestWithdrawnModelReinstatedIsReturnedTo(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	back := t0.Add(30 * time.Hour) // the model is reinstated
	doomed := 0
	up := func(route string) error {
		if (route == "" || route == "primary") && clk.Now().Before(back) {
			doomed++
			return errGone
		}
		return nil
	}
	route := func() string { return l.Config("a").Route }
	ok := callEvery(l, clk, "a", 60, time.Minute, up)
	if route() != "backup" || ok != 60 {
		t.Fatalf("after an hour: route %q, %d of 60 calls succeeded, %d requests to the withdrawn model; want backup, all", route(), ok, doomed)
	}
	if v, _ := l.View("a"); v.Home != "primary" || len(v.DeadRoutes) != 1 {
		t.Errorf("view: home %q, dead routes %+v; want home primary, dead", v.Home, v.DeadRoutes)
	}
	// To 30 hours: the probe a day in finds the model still withdrawn.
	ok = callEvery(l, clk, "a", 29*12, 5*time.Minute, up)
	if route() != "backup" || ok != 29*12 || doomed > 3 {
		t.Errorf("at 30 hours: route %q, %d of %d calls succeeded, %d requests to the withdrawn model; want backup, all, at most 3",
			route(), ok, 29*12, doomed)
	}
	// To 60 hours: the probe two days in finds it answering again.
	ok = callEvery(l, clk, "a", 30*12, 5*time.Minute, up)
	if r := route(); r != "" && r != "primary" || ok != 30*12 {
		t.Errorf("at 60 hours: route %q, %d of %d calls succeeded; want the primary, all", r, ok, 30*12)
	}
	if v, _ := l.View("a"); v.Home != "" || len(v.DeadRoutes) != 0 {
		t.Errorf("view at 60 hours: home %q, dead routes %+v; want neither", v.Home, v.DeadRoutes)
	}
	if doomed > 4 {
		t.Errorf("%d requests to the withdrawn model, want at most 4 (one a day)", doomed)
	}
}
