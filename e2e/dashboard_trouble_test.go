package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// troubleLoop is a Loop on a fake clock with three agents: "fixed", whose
// change was confirmed and whose calls have succeeded since (its window,
// failures before the fix included, under 90%); "away", on
// its route ladder's fallback "backup" since its primary went down; and
// "failing", whose calls fail, with nothing the strategy can do.
func troubleLoop(t *testing.T) *dashLoop {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	strategy := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		if a.AgentID != "fixed" {
			return nil, nil // no idea
		}
		c := a.Config
		c.Timeout += 2 * time.Second
		return &si.Tweak{Config: c, Reason: "raise the timeout"}, nil
	})
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(strategy),
		si.WithFlushInterval(0), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := &dashLoop{l: l, clk: clk}
	// fixed fails 12 times before its fix: over its window, whatever
	// config ran the calls, it succeeds less than 90%.
	for id, n := range map[string]int{"fixed": 12, "failing": 3} {
		if err := l.SetThreshold(id, si.Threshold{Failures: n, Window: time.Hour, Cooldown: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// away: its primary answers 503 from the 11th call on.
	if err := l.SetRoutes("away", si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		l.ExecuteWithImprovement(context.Background(), "away", func(_ context.Context, cfg si.Config) error {
			clk.Advance(100 * time.Millisecond)
			if i >= 10 && (cfg.Route == "" || cfg.Route == "primary") {
				return errUpstream
			}
			return nil
		})
		clk.Advance(time.Minute)
	}
	// failing: its calls fail from the 11th on.
	d.calls(t, "failing", 10, nil)
	d.calls(t, "failing", 10, errUpstream)
	// fixed (last, so that its calls are in its window of an hour): a fault, a change, its confirmation, then only successes.
	d.calls(t, "fixed", 5, nil)
	d.calls(t, "fixed", 12, errUpstream)
	d.waitChanges(t, "fixed", 1)
	d.callsUntil(t, "fixed", nil, si.ChangeConfirmed)
	d.calls(t, "fixed", 20, nil)
	for _, id := range []string{"fixed", "away", "failing"} {
		v, _ := l.View(id)
		t.Logf("%s: v%d route %q home %q, %d calls, %d failures, %d in a row, next %q", id, v.Config.Version, v.Config.Route, v.Home,
			v.Stats.Calls, v.Stats.Failures, v.Stats.ConsecutiveFailures, v.Next)
	}
	if v, _ := l.View("away"); v.Config.Route != "backup" && v.Home != "primary" {
		t.Fatalf("away: route %q, home %q: the scenario no longer leaves the agent on its fallback", v.Config.Route, v.Home)
	}
	if v, _ := l.View("fixed"); v.Health >= 0.9 || v.Change == nil || v.Change.State != si.ChangeConfirmed {
		t.Fatalf("fixed: health %.3f, change %+v: the scenario no longer leaves a confirmed fix in a window under 90%%", v.Health, v.Change)
	}
	return d
}

// troubleRow is a row of the agents table: its state, health and route
// cells as shown.
type troubleRow struct {
	Ref, State, Health, HealthClass, Success, Route, Next string
}

const readTroubleRows = `(() => {
	const keys = [...document.querySelectorAll("#agents thead th")].map((th) => th.dataset.key);
	const c = (tr, k) => tr.cells[keys.indexOf(k)];
	return [...document.querySelectorAll("#agents tbody tr")].map((tr) => ({Ref: tr.dataset.ref, State: c(tr, "state").dataset.v,
		Health: c(tr, "health").textContent, HealthClass: c(tr, "health").className, Success: c(tr, "success").textContent,
		Route: c(tr, "route").textContent, Next: c(tr, "next").textContent}));
})()`

// TestDashboardTrouble checks the agent list's trouble columns at 1400
// and 390 px: State, Route and Next step; the agent whose fix was
// confirmed and succeeds is not red, the one on its fallback says so, the
// failing one is in trouble and comes first sorted by trouble;
// percentages with one decimal; at 390 px the page does not scroll
// sideways (the table scrolls in its own box).
func TestDashboardTrouble(t *testing.T) {
	ctx := newBrowser(t)
	d := troubleLoop(t)
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	for _, w := range viewports {
		t.Run(w.name, func(t *testing.T) {
			do := doer(t, ctx)
			do("viewport", chromedp.EmulateViewport(w.width, w.height))
			do("list", chromedp.Navigate(srv.URL+"/si/#"), chromedp.Reload(),
				until(`document.querySelector("#count").textContent === "3 of 3 agents" && document.querySelector("#conn").classList.contains("live")`))
			heads := eval[[]string](t, ctx, `[...document.querySelectorAll("#agents thead th")].map((th) => th.dataset.key + ":" + th.textContent)`)
			for _, h := range []string{"state:State", "route:Route", "next:Next step"} {
				if !strings.Contains(strings.Join(heads, "|"), h) {
					t.Errorf("the table's columns %q lack %q", heads, h)
				}
			}
			do("sort by trouble", chromedp.Click(`#agents th[data-key="state"]`),
				until(`document.querySelector('#agents th[data-key="state"]').getAttribute("aria-sort") === "ascending"`))
			rows := eval[[]troubleRow](t, ctx, readTroubleRows)
			checkTroubleRows(t, d.l, rows)
			eval[bool](t, ctx, `(document.querySelector("#agents").closest(".scroll").scrollLeft = 0) === 0`) // the click on State scrolled it
			shot(t, ctx, "list-"+w.name)
			if w.width == 390 {
				if !eval[bool](t, ctx, noPageScroll) {
					t.Errorf("the list scrolls sideways at 390 px: scrollWidth %d", eval[int](t, ctx, `document.documentElement.scrollWidth`))
				}
				if s := eval[string](t, ctx, `getComputedStyle(document.querySelector("#agents").closest(".scroll")).overflowX`); s != "auto" && s != "scroll" {
					t.Errorf("the table's box has overflow-x %q: want it to scroll", s)
				}
				checkUnclipped(t, ctx, "list", "#count", "#list-view .pager button (one line)", "#agents tbody td.id a", ".tools label (one line)")
				checkBadge(t, ctx, "list")
			}
			do("the fixed agent's page", chromedp.Navigate(srv.URL+"/si/#/agent/fixed"),
				until(`document.querySelector("#agent-title").textContent === "fixed" && document.querySelector('#agent-facts [data-fact="health"]') !== null`))
			checkHealthFacts(t, ctx, rows)
		})
	}
}

// pct is a percentage as every view shows it: one decimal.
var pct = regexp.MustCompile(`^(100|[1-9]?[0-9])\.[0-9]%$`)

// checkTroubleRows checks the rows, sorted by trouble, against the loop.
func checkTroubleRows(t *testing.T, l *si.Loop, rows []troubleRow) {
	t.Helper()
	if len(rows) != 3 {
		t.Fatalf("rows %+v, want 3", rows)
	}
	by := map[string]troubleRow{}
	for _, r := range rows {
		by[r.Ref] = r
		if !pct.MatchString(r.Health) || !pct.MatchString(r.Success) {
			t.Errorf("%s: health %q, success %q: want percentages with one decimal", r.Ref, r.Health, r.Success)
		}
	}
	t.Logf("sorted by trouble: %+v", rows)
	if rows[0].Ref != "failing" || rows[0].State != admin.StateTrouble || !strings.Contains(rows[0].HealthClass, "bad") {
		t.Errorf("first row %+v: want failing, in trouble, its health in red", rows[0])
	}
	rank := map[string]int{admin.StateTrouble: 0, admin.StateWatch: 1, admin.StateOK: 2}
	for i := 1; i < len(rows); i++ {
		if rank[rows[i].State] < rank[rows[i-1].State] {
			t.Errorf("row %d (%s, %s) after %s (%s): not sorted by trouble", i, rows[i].Ref, rows[i].State, rows[i-1].Ref, rows[i-1].State)
		}
	}
	if f := by["fixed"]; f.State == admin.StateTrouble || strings.Contains(f.HealthClass, "bad") || f.Health != "100.0%" {
		t.Errorf("fixed, confirmed and succeeding since: %+v: want it not in trouble, its health 100.0%%, not red", f)
	}
	a := by["away"]
	v, _ := l.View("away")
	if a.State != admin.StateWatch || !strings.Contains(a.Route, "backup") || !strings.Contains(a.Route, "fallback") {
		t.Errorf("away, on its fallback: %+v: want watch, route backup · fallback", a)
	}
	if v.Next != "" && !strings.Contains(a.Next, v.Next) {
		t.Errorf("away: next step %q, the loop's %q", a.Next, v.Next)
	}
}

// checkHealthFacts checks the agent page's health as the list shows it
// (the success of the calls under the config in force, one decimal).
func checkHealthFacts(t *testing.T, ctx context.Context, rows []troubleRow) {
	t.Helper()
	got := text(t, ctx, `#agent-facts [data-fact="health"] dd`)
	for _, r := range rows {
		if r.Ref == "fixed" && got != r.Health {
			t.Errorf("fixed: the agent page's health %q, the list's %q", got, r.Health)
		}
	}
	for _, f := range []string{"health", "success"} {
		if s := text(t, ctx, fmt.Sprintf(`#agent-facts [data-fact=%q] dd`, f)); !pct.MatchString(s) {
			t.Errorf("the agent page's %s %q: want a percentage with one decimal", f, s)
		}
	}
}
