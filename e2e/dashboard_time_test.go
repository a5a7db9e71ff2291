package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// timeLoop is newDashLoop's agents, 5,000 more whose calls spread over
// three hours, and "flaky", whose change is rolled back seconds after it
// was applied, 90 s before now. The handler serves from the start, so
// that its timelines hold the traffic.
func timeLoop(t *testing.T) (*dashLoop, *httptest.Server) {
	t.Helper()
	d := newDashLoop(t)
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	get := func(path string) {
		res, err := http.Get(srv.URL + "/si" + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// The fleet: a call per agent every 20 minutes; one agent in 17 fails
	// every other call, a third of the others once.
	for chunk := range 10 {
		for i := range bigFleet {
			id := fmt.Sprintf("%s-%04d", teams[i%len(teams)], i)
			fail := i%17 == 0 && (chunk+i)%2 == 0 || i%3 == 0 && chunk == i%10
			d.l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
				if fail {
					return errUpstream
				}
				return nil
			})
		}
		get("/api/overview?limit=1") // samples every agent
		d.clk.Advance(20 * time.Minute)
	}
	if err := d.l.SetThreshold("flaky", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		d.calls(t, "flaky", 1, nil)
		if i%4 == 0 {
			get("/api/agents/flaky/series?range=hour")
		}
		d.clk.Advance(30 * time.Second)
	}
	d.calls(t, "flaky", 4, errUpstream)
	d.waitChanges(t, "flaky", 1)
	d.callsUntil(t, "flaky", errUpstream, si.ChangeRolledBack)
	d.clk.Advance(90 * time.Second)
	get("/api/agents/flaky/series?range=hour")
	return d, srv
}

// TestDashboardTimeAxis checks, at 1400 and at 390 px with 5,000 agents:
// the timeline's markers in time order at their true distances (a
// rollback seconds after its change, now 90 s later), the zoom buttons,
// the "what comes next" panel after a rollback, no truncated timestamp,
// and the overview sorted by trouble.
func TestDashboardTimeAxis(t *testing.T) {
	ctx := newBrowser(t)
	d, srv := timeLoop(t)
	ch := d.l.Changes("flaky")[0]
	t.Logf("flaky: applied %v, rolled back %v (%v later), now %v later", ch.AppliedAt.Format(time.TimeOnly), ch.DecidedAt.Format(time.TimeOnly),
		ch.DecidedAt.Sub(ch.AppliedAt), d.clk.Now().Sub(ch.DecidedAt))
	for _, w := range []struct {
		name   string
		width  int
		height int
	}{{"1400", 1400, 900}, {"390", 390, 844}} {
		t.Run(w.name, func(t *testing.T) {
			do := doer(t, ctx)
			do("viewport", chromedp.EmulateViewport(int64(w.width), int64(w.height)))
			checkTimeAxis(t, ctx, srv, d, ch, w.name)
			checkReadable(t, ctx, w.name)
			checkOverview(t, ctx, srv, d.l, w.name)
			do("list", chromedp.Navigate(srv.URL+"/si/#"), until(`document.querySelector("#count").textContent.startsWith("5064 of 5064")`))
			checkNoTruncatedTimes(t, ctx, "list")
			shot(t, ctx, "list-"+w.name)
		})
	}
}

// marker is a timeline element's time and horizontal centre.
type marker struct {
	Kind string
	T, X float64
}

const readMarkers = `[...document.querySelectorAll("#timeline rect.marker"), document.querySelector("#timeline-now")].map(e => {
	const r = e.getBoundingClientRect(); return {Kind: e.dataset.kind || "now", T: +e.dataset.t, X: r.x + r.width / 2}; })`

func checkTimeAxis(t *testing.T, ctx context.Context, srv *httptest.Server, d *dashLoop, ch si.Change, width string) {
	t.Helper()
	do := doer(t, ctx)
	do("agent page", chromedp.Navigate(srv.URL+"/si/#/agent/flaky"), chromedp.Reload(),
		until(`document.querySelectorAll("#timeline rect.marker").length === 2 && document.querySelectorAll("#timeline polyline.series").length > 0`))
	if r := eval[string](t, ctx, `document.querySelector('#ranges [aria-pressed="true"]').dataset.range`); r != "fit" {
		t.Errorf("range %q, want fit (the change is minutes old)", r)
	}
	ms := eval[[]marker](t, ctx, readMarkers)
	if len(ms) != 3 || ms[0].Kind != "change" || ms[1].Kind != "rollback" || ms[2].Kind != "now" {
		t.Fatalf("markers %+v", ms)
	}
	// "now" is the handler's clock at its last answer: the page's own
	// clock stands still (pageScript).
	now := float64(d.clk.Now().UnixMilli())
	if ms[0].T != float64(ch.AppliedAt.UnixMilli()) || ms[1].T != float64(ch.DecidedAt.UnixMilli()) || ms[2].T != now {
		t.Errorf("marker times %+v, want %v, %v, %v", ms, ch.AppliedAt.UnixMilli(), ch.DecidedAt.UnixMilli(), now)
	}
	// In time order, and each at its true distance: pixels per second the
	// same between every pair, to within a pixel.
	pxPerMs := (ms[2].X - ms[0].X) / (ms[2].T - ms[0].T)
	for i := 1; i < len(ms); i++ {
		if ms[i].X <= ms[i-1].X {
			t.Errorf("%s at x %.1f is not right of %s at %.1f", ms[i].Kind, ms[i].X, ms[i-1].Kind, ms[i-1].X)
		}
		if want := ms[0].X + (ms[i].T-ms[0].T)*pxPerMs; math.Abs(ms[i].X-want) > 1 {
			t.Errorf("%s at x %.1f, want %.1f (proportional to its time)", ms[i].Kind, ms[i].X, want)
		}
	}
	t.Logf("%s px: change→rollback %.1f px for %v, rollback→now %.1f px for %v", width, ms[1].X-ms[0].X, ch.DecidedAt.Sub(ch.AppliedAt),
		ms[2].X-ms[1].X, time.Duration(ms[2].T-ms[1].T)*time.Millisecond)
	// Labelled ticks, left to right; the zoom buttons change the range.
	span := func() float64 {
		ts := eval[[]float64](t, ctx, `[...document.querySelectorAll("#timeline .tick-label")].map(e => +e.dataset.t)`)
		if len(ts) < 3 || !slices.IsSorted(ts) || !checkTicksApart(t, ctx, width) {
			t.Errorf("ticks %v: want 3 or more, in order, apart", ts)
			return 0
		}
		return ts[len(ts)-1] - ts[0]
	}
	fit := span()
	do("hour", chromedp.Click(`#ranges [data-range="hour"]`), until(`document.querySelector('#ranges [data-range="hour"]').getAttribute("aria-pressed") === "true"`))
	hour := span()
	do("day", chromedp.Click(`#ranges [data-range="day"]`), until(`document.querySelector('#ranges [data-range="day"]').getAttribute("aria-pressed") === "true" && [...document.querySelectorAll("#timeline .tick-label")].some(e => e.textContent.includes(":00"))`))
	day := span()
	dayMs := eval[[]marker](t, ctx, readMarkers)
	do("week", chromedp.Click(`#ranges [data-range="week"]`), until(`document.querySelector('#ranges [data-range="week"]').getAttribute("aria-pressed") === "true"`))
	week := span()
	if !(fit < hour && hour < time.Hour.Seconds()*1000 && hour < day && day < week && week >= 3*24*time.Hour.Seconds()*1000) {
		t.Errorf("ticks span %v (fit), %v (hour), %v (day), %v (week)", time.Duration(fit)*time.Millisecond, time.Duration(hour)*time.Millisecond, time.Duration(day)*time.Millisecond, time.Duration(week)*time.Millisecond)
	}
	if len(dayMs) != 3 || dayMs[2].X-dayMs[0].X >= ms[2].X-ms[0].X {
		t.Errorf("zoomed out to the day, the markers did not come closer: %+v, hour %+v", dayMs, ms)
	}
	if labels := eval[string](t, ctx, `[...document.querySelectorAll("#timeline .tick-label")].map(e => e.textContent).join(" | ")`); !strings.Contains(labels, "Feb") && !strings.Contains(labels, "Mar") {
		t.Errorf("week ticks %q: no date", labels)
	}
	do("fit", chromedp.Click(`#ranges [data-range="fit"]`), until(`document.querySelectorAll("#timeline rect.marker").length === 2`))
	// What comes next, after the rollback.
	next := text(t, ctx, "#next-panel")
	for _, s := range []string{"Next step", "rolled back", "runs v1 again", "not tried again", "Pending proposal"} {
		if !strings.Contains(next, s) {
			t.Errorf("the next panel lacks %q: %s", s, next)
		}
	}
	checkNoTruncatedTimes(t, ctx, "agent page")
	if !eval[bool](t, ctx, noPageScroll) {
		t.Errorf("the agent page scrolls sideways at %s px", width)
	}
	// Clicked from the page, again until its detail shows: the timeline
	// may redraw between a query and a click (a sample, a relative time),
	// which left chromedp's click with a node that was gone.
	do("a marker", until(`(() => {
		if (document.querySelector("#marker-detail").textContent.includes("rolled back")) return true;
		const m = document.querySelector("#timeline rect.marker.rollback");
		if (m) m.dispatchEvent(new MouseEvent("click", {bubbles: true}));
		return false;
	})()`))
	shot(t, ctx, "agent-"+width)
}

// checkNoTruncatedTimes checks that every relative time shows whole, with
// the exact time in its title.
func checkNoTruncatedTimes(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	type cut struct {
		Text, Title      string
		Scroll, ClientW  float64
		Visible, HasTime bool
	}
	cs := eval[[]cut](t, ctx, `[...document.querySelectorAll("[data-at]")].filter(e => e.offsetParent !== null).map(e => {
		const box = e.tagName === "TD" ? e : e.parentElement;
		return {Text: e.textContent, Title: e.title, Scroll: box.scrollWidth, ClientW: box.clientWidth, Visible: true, HasTime: /ago|in |just now/.test(e.textContent)}; })`)
	if len(cs) == 0 {
		t.Errorf("%s: no timestamps", where)
	}
	for _, c := range cs {
		if c.Scroll > c.ClientW+1 || !c.HasTime || !strings.Contains(c.Title, "2026-") {
			t.Errorf("%s: timestamp %q (title %q) cut: scrollWidth %v > clientWidth %v", where, c.Text, c.Title, c.Scroll, c.ClientW)
		}
	}
	t.Logf("%s: %d timestamps whole", where, len(cs))
}

// checkOverview opens the overview: a page of sparklines, sorted by
// trouble (docs/dashboard.md, "Trouble at a glance"): by state (trouble,
// watch, ok), then by the success of the calls under the config in force
// (1 with none), lowest first, then by ID, as the handler's summaries
// (GET /api/agents) have them.
func checkOverview(t *testing.T, ctx context.Context, srv *httptest.Server, l *si.Loop, width string) {
	t.Helper()
	do := doer(t, ctx)
	do("overview", chromedp.Navigate(srv.URL+"/si/#/overview"), until(`document.querySelectorAll("#ov-grid .spark-card").length === 60`))
	type card struct {
		Ref, State string
		Health     float64
		Lines      int
	}
	cards := eval[[]card](t, ctx, `[...document.querySelectorAll("#ov-grid .spark-card")].map(e => ({Ref: e.dataset.ref, State: e.dataset.state, Health: +e.dataset.health, Lines: e.querySelectorAll("polyline").length}))`)
	rank := map[string]int{admin.StateTrouble: 0, admin.StateWatch: 1, admin.StateOK: 2}
	rate := func(a *admin.AgentSummary) float64 {
		if a.Current.Calls == 0 {
			return 1
		}
		return a.Current.SuccessRate
	}
	all, n := summaries(t, srv), 0
	for range l.Agents() {
		n++
	}
	if len(all) != n {
		t.Fatalf("%d summaries, the loop has %d agents", len(all), n)
	}
	slices.SortFunc(all, func(a, b admin.AgentSummary) int {
		return cmp.Or(cmp.Compare(rank[a.State], rank[b.State]), cmp.Compare(rate(&a), rate(&b)), strings.Compare(a.ID, b.ID))
	})
	sparks := 0
	for i, c := range cards {
		if w := &all[i]; c.Ref != w.Ref || c.State != w.State || c.Health != rate(w) {
			t.Errorf("card %d: %s (%s, %v), want %s (%s, %v)", i, c.Ref, c.State, c.Health, w.Ref, w.State, rate(w))
		}
		sparks += c.Lines
	}
	if sparks == 0 {
		t.Error("no sparkline has a line")
	}
	if !eval[bool](t, ctx, noPageScroll) {
		t.Errorf("the overview scrolls sideways at %s px", width)
	}
	do("overview page 2", chromedp.Click(`#ov-next`), until(`document.querySelector("#ov-info").textContent.includes("page 2 of 85")`))
	do("overview page 1", chromedp.Click(`#ov-prev`), until(`document.querySelector("#ov-info").textContent.includes("page 1 of 85")`))
	shot(t, ctx, "overview-"+width)
}

// summaries reads every agent's summary from the handler of srv (GET
// /api/agents, page by page).
func summaries(t *testing.T, srv *httptest.Server) []admin.AgentSummary {
	t.Helper()
	var all []admin.AgentSummary
	for after := ""; ; {
		res, err := http.Get(srv.URL + "/si/api/agents?limit=1000&after=" + url.QueryEscape(after))
		if err != nil {
			t.Fatal(err)
		}
		var page admin.AgentList
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Agents...)
		if after = page.Next; after == "" {
			return all
		}
	}
}

// checkTicksApart reports whether the timeline's tick labels (and the
// dates under them) leave each other room: at 390 px the first label,
// with its date, ran into the next.
func checkTicksApart(t *testing.T, ctx context.Context, width string) bool {
	t.Helper()
	overlaps := eval[[]string](t, ctx, `(() => { const out = [];
		for (const cls of ["tick-label", "tick-date"]) {
			const bs = [...document.querySelectorAll("#timeline ." + cls)].map(e => [e.textContent, e.getBoundingClientRect()]);
			for (let i = 1; i < bs.length; i++) if (bs[i][1].left < bs[i-1][1].right + 2) out.push(bs[i-1][0] + " | " + bs[i][0]);
		}
		return out; })()`)
	if len(overlaps) > 0 {
		t.Errorf("%s px: tick labels overlap: %q", width, overlaps)
	}
	return len(overlaps) == 0
}

// checkReadable checks, on the agent page, that the latency shows a
// point where a version's run has one slot (a polyline of one point
// draws nothing: the panel was empty after a rollback) and that the
// "what comes next" panel shows all it says without scrolling.
func checkReadable(t *testing.T, ctx context.Context, width string) {
	t.Helper()
	type seen struct {
		Success, P50, P95      int
		NextScroll, NextClient float64
	}
	s := eval[seen](t, ctx, `({Success: document.querySelectorAll("#timeline circle.dot").length,
		P50: document.querySelectorAll("#latency circle.lat-dot.p50").length, P95: document.querySelectorAll("#latency circle.lat-dot.p95").length,
		NextScroll: document.querySelector("#next-panel").scrollHeight, NextClient: document.querySelector("#next-panel").clientHeight})`)
	if s.Success == 0 || s.P50 != s.Success || s.P95 != s.Success {
		t.Errorf("%s px: %d success points, %d p50 and %d p95 points shown: want one of each per point", width, s.Success, s.P50, s.P95)
	}
	if s.NextScroll > s.NextClient+1 {
		t.Errorf("%s px: the next panel is cut: %v px of content in %v", width, s.NextScroll, s.NextClient)
	}
}
