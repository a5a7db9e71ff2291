package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestDashboardHistoryReadOnly runs the quick start into a state
// directory and serves it as `selfimprove serve --dir` does (a Loop on a
// ReadOnlyStore, a handler started after every call): at 1400 and 390 px
// the agent's timeline shows the calls the loop stored (points, not "no
// calls in this range"), its markers are labelled, the next step names
// the route to return to (no `probe route ""`), the overview's sparkline
// has more than one point, and at 390 px nothing on the pages is cut.
func TestDashboardHistoryReadOnly(t *testing.T) {
	ctx := newBrowser(t)
	l := quickstartLoop(t, true)
	srv := serve(t, l, admin.Options{Token: dashToken, OpenReads: true})
	for _, w := range viewports {
		t.Run(w.name, func(t *testing.T) {
			do := doer(t, ctx)
			do("viewport", chromedp.EmulateViewport(w.width, w.height))
			do("agent", chromedp.Navigate(srv.URL+"/si/#/agent/"+quickstartAgent), chromedp.Reload(),
				until(`document.querySelector("#agent-title").textContent === "`+quickstartAgent+`" && document.querySelector("#conn").classList.contains("live")`),
				handled("/si/api/agents/"+quickstartAgent+"/series", 1),
				until(`document.querySelectorAll("#timeline .marker-label").length === 4`))
			checkStoredTimeline(t, ctx)
			checkNoProbeOfNothing(t, ctx)
			shot(t, ctx, "agent-"+w.name)
			if w.width == 390 {
				checkUnclipped(t, ctx, "agent page", `#agent-facts [data-fact="next"] dd`, "#agent-facts dd",
					"#ranges button (one line)", "#timeline .marker-label")
				checkBadge(t, ctx, "agent page")
			}
			if !eval[bool](t, ctx, noPageScroll) {
				t.Errorf("the agent page scrolls sideways at %s px", w.name)
			}
			do("overview", chromedp.Navigate(srv.URL+"/si/#/overview"), chromedp.Reload(),
				until(`document.querySelectorAll("#ov-grid .spark-card").length === 1`), handled("/si/api/overview", 1))
			sparks := eval[[]int](t, ctx, `[...document.querySelectorAll("#ov-grid .spark polyline")].map(e => e.points.numberOfItems)`)
			most := 0
			for _, n := range sparks {
				most = max(most, n)
			}
			if most < 2 {
				t.Errorf("the sparkline's lines have %v points: want a line of more than one", sparks)
			}
			shot(t, ctx, "overview-"+w.name)
			if w.width == 390 {
				checkUnclipped(t, ctx, "overview", "#overview-view .pager button (one line)", "#ov-info", ".spark-card a", ".spark-card .tstate", ".spark-card .num", ".spark-card > .muted")
				if tops := boxes(t, ctx, "#overview-view .pager button"); len(tops) != 2 || tops[0].Y != tops[1].Y {
					t.Errorf("the overview's pager buttons are not on one row: %v", tops)
				}
				checkBadge(t, ctx, "overview")
			}
			if !eval[bool](t, ctx, noPageScroll) {
				t.Errorf("the overview scrolls sideways at %s px", w.name)
			}
		})
	}
}

// checkStoredTimeline checks the agent page's timeline: points of the
// calls the loop stored joined in lines, and the markers labelled by what
// happened.
func checkStoredTimeline(t *testing.T, ctx context.Context) {
	t.Helper()
	type drawn struct {
		Dots, Lines, Longest int
		Empty                bool
		Labels               []string
	}
	d := eval[drawn](t, ctx, `(() => {
		const lines = [...document.querySelectorAll("#timeline polyline.series")];
		return {Dots: document.querySelectorAll("#timeline circle.dot").length, Lines: lines.length,
			Longest: Math.max(0, ...lines.map(e => e.points.numberOfItems)),
			Empty: [...document.querySelectorAll("#timeline text")].some(e => e.textContent.startsWith("no calls")),
			Labels: [...document.querySelectorAll("#timeline .marker-label")].map(e => e.textContent)};
	})()`)
	t.Logf("timeline: %d points, %d lines (the longest %d points), labels %q", d.Dots, d.Lines, d.Longest, d.Labels)
	if d.Empty || d.Dots < 10 || d.Longest < 2 {
		t.Errorf("the timeline shows %d points, lines of %d points at most (empty: %v): want the stored calls", d.Dots, d.Longest, d.Empty)
	}
	if got, want := strings.Join(d.Labels, ", "), "applied v2, rolled back v2, applied v3, confirmed v3"; got != want {
		t.Errorf("marker labels %q, want %q", got, want)
	}
	// No label on another, nor under a marker's square.
	for _, sel := range []string{"#timeline .marker-label, #timeline rect.marker", "#timeline .version-label"} {
		if o := eval[[]string](t, ctx, `((sel) => { const out = [];
			const bs = [...document.querySelectorAll(sel)].map(e => [e.tagName === "rect" ? e.dataset.kind + " marker" : e.textContent, e.getBoundingClientRect()]);
			for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
				const a = bs[i][1], b = bs[j][1];
				if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom && !(bs[i][0] + bs[j][0]).match(/marker.*marker/)) out.push(bs[i][0] + " | " + bs[j][0]);
			}
			return out; })(`+jsString(sel)+`)`); len(o) > 0 {
			t.Errorf("%s: on each other: %q", sel, o)
		}
	}
}

// checkNoProbeOfNothing checks that the page names the route the agent
// will probe: the quick start's agent left its default route, "primary".
func checkNoProbeOfNothing(t *testing.T, ctx context.Context) {
	t.Helper()
	body := eval[string](t, ctx, `document.querySelector("#agent-view").textContent`)
	if strings.Contains(body, `route ""`) {
		t.Errorf("the agent page names an empty route: %s", body)
	}
	if next := text(t, ctx, "#next-panel"); !strings.Contains(next, `"primary"`) {
		t.Errorf("the next panel does not name the route to return to, \"primary\": %s", next)
	}
}

// checkUnclipped checks that each element sels match, among those shown,
// lies inside the window and inside every ancestor that clips it, and
// shows its whole text (its scrollWidth within its clientWidth); for a
// selector ending in " (one line)", that its text is on one line.
func checkUnclipped(t *testing.T, ctx context.Context, where string, sels ...string) {
	t.Helper()
	type res struct {
		Shown int
		Cut   []string
	}
	for _, s := range sels {
		sel, oneLine := strings.CutSuffix(s, " (one line)")
		r := eval[res](t, ctx, `((sel, oneLine) => {
			const out = {Shown: 0, Cut: []};
			const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (typeof e.className === "string" && e.className ? "." + e.className.replace(/ /g, ".") : "");
			for (const e of document.querySelectorAll(sel)) {
				const r = e.getBoundingClientRect();
				if (r.width === 0 && r.height === 0) continue;
				out.Shown++;
				const what = JSON.stringify((e.textContent || "").slice(0, 40));
				if (r.left < -0.5 || r.right > window.innerWidth + 0.5) out.Cut.push(what + " spans " + Math.round(r.left) + ".." + Math.round(r.right) + " px of a " + window.innerWidth + " px window");
				if (e.scrollWidth > e.clientWidth + 1) out.Cut.push(what + " needs " + e.scrollWidth + " px, has " + e.clientWidth);
				if (oneLine) { // the lines of its text: its text's boxes a line apart
					const bottoms = [], w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
					for (let n = w.nextNode(); n; n = w.nextNode()) {
						const rg = document.createRange();
						rg.selectNodeContents(n);
						for (const b of rg.getClientRects()) if (b.width > 0) bottoms.push(b.bottom);
					}
					bottoms.sort((a, b) => a - b);
					const lines = bottoms.filter((b, i) => i === 0 || b - bottoms[i - 1] > 4).length;
					if (lines > 1) out.Cut.push(what + " on " + lines + " lines");
				}
				for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
					const st = getComputedStyle(p);
					if (st.overflowX === "visible" && st.overflowY === "visible") continue;
					const b = p.getBoundingClientRect();
					if (r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5) {
						out.Cut.push(what + " cut by " + name(p));
					}
				}
			}
			return out;
		})(`+jsString(sel)+`, `+strconv.FormatBool(oneLine)+`)`)
		if r.Shown == 0 {
			t.Errorf("%s: nothing shown matches %s", where, s)
		}
		for _, c := range r.Cut {
			t.Errorf("%s: %s: %s", where, s, c)
		}
	}
}

// checkBadge checks that the live badge shows whole with each text it
// takes, and leaves the navigation's links whole (the page is reloaded
// after it, by the next step of the test).
func checkBadge(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	nav := boxes(t, ctx, "header nav a")
	for _, s := range []string{"connecting…", "live", "reconnecting…", "live updates need the token"} {
		eval[bool](t, ctx, `(() => { const c = document.querySelector("#conn"); c.textContent = `+jsString(s)+`; c.className = "conn `+map[bool]string{true: "live", false: "reconnecting"}[s == "live"]+`"; return true; })()`)
		checkUnclipped(t, ctx, where+", badge "+strconv.Quote(s), "#conn (one line)", "header nav a (one line)")
		if after := boxes(t, ctx, "header nav a"); !slices.Equal(after, nav) {
			t.Errorf("%s: the badge %q moved the links: %v, were %v", where, s, after, nav)
		}
	}
}
