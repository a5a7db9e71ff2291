package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 26, item 4: the agent page's next panel says what the loop will
// do next and when: cooling down until a time with the next route named,
// the dead routes, and for an agent away from its primary, the probe
// that may bring it home.
func TestDashboardRouteNextStep(t *testing.T) {
	ctx := newBrowser(t)
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	calls := func(agent string, n int, up func(route string) error) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
				clk.Advance(100 * time.Millisecond)
				return up(cfg.Route)
			})
			clk.Advance(10 * time.Second)
		}
	}
	start := clk.Now()
	calls("away", 40, func(r string) error {
		if (r == "" || r == "primary") && clk.Now().Before(start.Add(time.Hour)) {
			return errUpstream
		}
		return nil
	})
	calls("cooling", 3, func(r string) error {
		if r == "" || r == "primary" {
			return errors.New("404 model_not_found: the model `primary` does not exist")
		}
		return nil
	})
	calls("cooling", 30, func(string) error { return errors.New("400 invalid_request_error: messages: unknown field") })
	srv := serve(t, l, admin.Options{Now: clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("cooling", chromedp.Navigate(srv.URL+"/si/#/agent/cooling"),
		until(`document.querySelector("#agent-title").textContent === "cooling" && document.querySelector("#next-panel").textContent.includes("Next step")`))
	next := text(t, ctx, "#next-panel")
	for _, s := range []string{`cooling down; next: route "backup"`, "Cooldown until", "Dead routes", "primary until"} {
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
