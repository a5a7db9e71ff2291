package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// Issue 26, item 4: the agent page's next panel says what the loop will
// do next and when: cooling down until a time with the next route named,
// the dead routes, and for an agent away from its primary, the probe
// that may bring it home.
func TestDashboardRouteNextStep(t *testing.T) {
	ctx := newBrowser(t)
	l, clk := looptest.NextStepLoop(t)
	srv := serve(t, l, admin.Options{Now: clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("cooling", chromedp.Navigate(srv.URL+"/si/#/agent/cooling"),
		until(`document.querySelector("#agent-title").textContent === "cooling" && document.querySelector("#next-panel").textContent.includes("Next step")`))
	next := text(t, ctx, "#next-panel")
	for _, s := range []string{`cooling down; next: the strategy`, "Cooldown until", "Dead routes", "primary until"} {
		if !strings.Contains(next, s) {
			t.Errorf("cooling: the next panel lacks %q: %s", s, next)
		}
	}
	do("away", chromedp.Navigate(srv.URL+"/si/#/agent/away"),
		until(`document.querySelector("#agent-title").textContent === "away" && document.querySelector("#next-panel").textContent.includes("Next step")`))
	if next := text(t, ctx, "#next-panel"); !strings.Contains(next, "Probe schedule") || !strings.Contains(next, `away from route "primary"`) {
		t.Errorf("away: the next panel lacks the probe of the primary: %s", next)
	}
}
