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

// TestDashboardNextPanel checks the agent page's "what comes next" row by
// row against Loop.View, for an agent whose change is under verification,
// one in its cooldown after a confirmed change, one with a pending
// proposal, and one on a route ladder whose primary model is gone (dead
// routes, the probe schedule). The rollback case is TestDashboardTimeAxis's.
func TestDashboardNextPanel(t *testing.T) {
	ctx := newBrowser(t)
	d := newDashLoop(t)
	if err := d.l.SetThreshold("cool", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: 6 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	d.calls(t, "cool", 20, nil)
	d.calls(t, "cool", 4, errUpstream)
	d.waitChanges(t, "cool", 1)
	d.callsUntil(t, "cool", nil, si.ChangeConfirmed)
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("viewport", chromedp.EmulateViewport(1400, 900))
	want := map[string][]string{
		"checkout": {"Under verification", "kept if its calls do as well as before"},
		"cool":     {"Cooldown until", "cooling down", "Last change", "confirmed"},
		"review":   {"Pending proposal", "waits for a person"},
	}
	for id, parts := range want {
		checkNextPanel(t, ctx, srv.URL, d.l, id, parts)
	}
	r := routeLadderLoop(t)
	rsrv := serve(t, r.l, admin.Options{Now: r.clk.Now, Token: dashToken, OpenReads: true})
	for id, parts := range map[string][]string{
		"routed": {"Dead routes", "primary until"},
		"away":   {"Probe schedule", `away from route "primary"; a probe returns to it`},
	} {
		v, _ := r.l.View(id)
		t.Logf("%s: next %q at %v, home %q, dead %+v", id, v.Next, v.NextAt, v.Home, v.DeadRoutes)
		if id == "away" && v.Home != "primary" {
			t.Fatalf("away: home %q, want primary: the scenario no longer leaves the agent away", v.Home)
		}
		checkNextPanel(t, ctx, rsrv.URL, r.l, id, parts)
		shot(t, ctx, "next-"+id)
	}
}

// checkNextPanel opens id's page and checks that its next panel names
// the loop's next step for it and each of parts.
func checkNextPanel(t *testing.T, ctx context.Context, url string, l *si.Loop, id string, parts []string) {
	t.Helper()
	v, _ := l.View(id)
	do := doer(t, ctx)
	do(id, chromedp.Navigate(url+"/si/#/agent/"+id), chromedp.Reload(),
		until(`document.querySelector("#agent-title").textContent === "`+id+`" && document.querySelector("#next-panel").textContent.includes("Next step")`))
	got := text(t, ctx, "#next-panel")
	if !strings.Contains(got, v.Next) {
		t.Errorf("%s: next panel %q lacks the loop's next step %q", id, got, v.Next)
	}
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("%s: next panel %q lacks %q", id, got, p)
		}
	}
}

// routeLadderLoop is a loop on the routes primary, backup, spare: its
// agent "away" left the overloaded primary for backup and probes
// primary; "routed" then found primary's model withdrawn.
func routeLadderLoop(t *testing.T) *dashLoop {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	call := func(id string, n int, primary error) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), id, func(_ context.Context, cfg si.Config) error {
				clk.Advance(100 * time.Millisecond)
				if cfg.Route == "" || cfg.Route == "primary" {
					return primary
				}
				return nil
			})
			clk.Advance(time.Minute)
		}
	}
	call("away", 60, errUpstream) // moved to backup, confirmed, primary probed
	call("routed", 10, errors.New("404 model_not_found: the model `primary` does not exist"))
	return &dashLoop{l: l, clk: clk}
}
