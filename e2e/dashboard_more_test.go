package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// doer returns a function running browser steps that fails the test on
// an error.
func doer(t testing.TB, ctx context.Context) func(string, ...chromedp.Action[chromedp.Void]) {
	return func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// plainLoop is a Loop on a fake clock with no strategy and no notifier.
func plainLoop(t testing.TB) *dashLoop {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &dashLoop{l: l, clk: clk}
}

const bigFleet = 5000

var teams = []string{"pay", "search", "review", "mail", "chat"}

// TestDashboard5000Agents loads a loop of 5,000 agents: the page reads
// them in a few requests of 1,000, renders one page of rows after each,
// and keeps one page of rows in the DOM; sorting by success rate and
// filtering by a prefix give the loop's rows. How long it takes is
// BenchmarkDashboard5000Agents's.
func TestDashboard5000Agents(t *testing.T) {
	ctx := newBrowser(t)
	d := bigFleetLoop(t)
	srv, reqs := serveCounted(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	checkBigFleetLoads(t, ctx, srv, reqs, d.l)
	desc := checkBigFleetSorted(t, ctx, d.l)
	checkBigFleetFiltered(t, ctx, d.l, desc)
}

// BenchmarkDashboard5000Agents measures the time from navigation until
// the table's count and pager read 5,000 agents (the page reads them 1,000
// at a time and renders a page of 50 rows after each read).
func BenchmarkDashboard5000Agents(b *testing.B) {
	ctx := newBrowser(b)
	d := bigFleetLoop(b)
	srv := serve(b, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	do := doer(b, ctx)
	for b.Loop() {
		do("navigate", chromedp.Navigate(srv.URL+"/si/"), until(bigFleetShown))
	}
}

// bigFleetLoop returns a plain loop with bigFleet agents that made calls.
func bigFleetLoop(t testing.TB) *dashLoop {
	t.Helper()
	d := plainLoop(t)
	l := d.l
	// Agent i makes 2 to 10 calls, every other one with a failure: one
	// failure stays under every threshold profile, so no analysis runs and
	// the numbers stay put; success rates spread from 50 % to 100 %.
	for i := range bigFleet {
		id := fmt.Sprintf("%s-%04d", teams[i%len(teams)], i)
		n := 2 + i%9
		for c := range n {
			var err error
			if i%2 == 1 && c == 0 {
				err = errUpstream
			}
			l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return err })
		}
	}
	d.clk.Advance(time.Second)
	return d
}

// bigFleetShown is true once the table's count and pager read bigFleet
// agents.
var bigFleetShown = fmt.Sprintf(`document.querySelector("#count").textContent === "%d of %d agents" && document.querySelector("#page-info").textContent === "page 1 of %d"`,
	bigFleet, bigFleet, bigFleet/50)

// checkBigFleetLoads opens the page on the big fleet and counts its work:
// it reads the agents in requests of 1,000 (not one by one), reads no
// agent's detail, reads under 2 KB an agent, creates one page of rows per
// read (not a row per agent), and keeps one page of rows in the DOM.
func checkBigFleetLoads(t *testing.T, ctx context.Context, srv *httptest.Server, reqs *requests, l *si.Loop) {
	t.Helper()
	do := doer(t, ctx)
	const list, perRead = "/api/agents", 1000 // the page's FETCH_PAGE
	do("navigate", chromedp.Navigate(srv.URL+"/si/"))
	do("all agents", until(bigFleetShown))
	do("the answers handled", handled("/si"+list, reqs.count(list)))
	reads, sent := reqs.count(list), reqs.sent(list)
	var details []string
	for p := range reqs.snapshot() {
		if strings.HasPrefix(p, list+"/") {
			details = append(details, p)
		}
	}
	rows := eval[int](t, ctx, `window.__e2e.rows`)
	t.Logf("5,000 agents: %d reads of the list, %d bytes (%d an agent), %d rows created", reads, sent, sent/bigFleet, rows)
	if want := (bigFleet + perRead - 1) / perRead; reads != want {
		t.Errorf("the page read the agent list %d times, want %d reads of %d agents", reads, want, perRead)
	}
	if len(details) > 0 {
		t.Errorf("the page read %d agents one by one: %v…", len(details), details[:min(3, len(details))])
	}
	if sent > 2048*bigFleet {
		t.Errorf("the page read %d bytes for %d agents, want under 2 KB an agent", sent, bigFleet)
	}
	// A render after each read and one at the end: 300 rows; one more
	// render is allowed.
	if rows > 50*(reads+2) {
		t.Errorf("the page created %d table rows in %d reads, want a page of 50 a read (and two more renders) at most", rows, reads)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#agents tr").length`); n > 51 {
		t.Errorf("%d rows in the table's DOM, want one page (50) and the header", n)
	}
	checkRows(t, l, rowsOf(t, ctx))
	shot(t, ctx, "1-5000-agents")
}

// fleetAgent is an agent of the big fleet and its success rate.
type fleetAgent struct {
	id      string
	success float64
}

// rowRefs returns the agent IDs of rows.
func rowRefs(rows []row) []string {
	var s []string
	for _, r := range rows {
		s = append(s, r.Ref)
	}
	return s
}

// pageIDs returns the IDs of the first 50 agents of as, a page of the
// table.
func pageIDs(as []fleetAgent) []string {
	var s []string
	for _, a := range as[:min(50, len(as))] {
		s = append(s, a.id)
	}
	return s
}

// checkBigFleetSorted sorts the table by success rate, ascending then
// descending, and checks the first page against the loop's agents each
// time. It returns the agents sorted by success rate, descending.
func checkBigFleetSorted(t *testing.T, ctx context.Context, l *si.Loop) []fleetAgent {
	t.Helper()
	do := doer(t, ctx)
	var fleet []fleetAgent
	for id := range l.Agents() {
		fleet = append(fleet, fleetAgent{id, l.Stats(id).SuccessRate})
	}
	if len(fleet) != bigFleet {
		t.Fatalf("the loop has %d agents, want %d", len(fleet), bigFleet)
	}
	bySuccess := func(x, y fleetAgent) int {
		return cmp.Or(cmp.Compare(x.success, y.success), strings.Compare(x.id, y.id))
	}
	slices.SortFunc(fleet, bySuccess)

	// Sorted by success rate, ascending then descending.
	do("sort by success", chromedp.Click(`#agents th[data-key="success"]`), until(`document.querySelector('#agents th[data-key="success"]').getAttribute("aria-sort") === "ascending"`))
	rows := rowsOf(t, ctx)
	if got, w := rowRefs(rows), pageIDs(fleet); !slices.Equal(got, w) {
		t.Errorf("sorted by success, ascending:\n page %v\n loop %v", got, w)
	}
	checkRows(t, l, rows)
	if fleet[0].success >= fleet[len(fleet)-1].success {
		t.Fatalf("the fleet's success rates do not spread: %v … %v", fleet[0].success, fleet[len(fleet)-1].success)
	}
	do("sort by success, descending", chromedp.Click(`#agents th[data-key="success"]`), until(`document.querySelector('#agents th[data-key="success"]').getAttribute("aria-sort") === "descending"`))
	desc := slices.Clone(fleet)
	slices.SortFunc(desc, func(x, y fleetAgent) int {
		return cmp.Or(cmp.Compare(y.success, x.success), strings.Compare(x.id, y.id))
	})
	rows = rowsOf(t, ctx)
	if got, w := rowRefs(rows), pageIDs(desc); !slices.Equal(got, w) {
		t.Errorf("sorted by success, descending:\n page %v\n loop %v", got, w)
	}
	checkRows(t, l, rows)
	return desc
}

// checkBigFleetFiltered filters the table, sorted by success rate
// descending (desc), by a prefix, and checks the first and the last page.
func checkBigFleetFiltered(t *testing.T, ctx context.Context, l *si.Loop, desc []fleetAgent) {
	t.Helper()
	do := doer(t, ctx)
	// Filtered by a prefix, still sorted by success rate descending; then
	// the last page.
	var pay []fleetAgent
	for _, a := range desc {
		if strings.HasPrefix(a.id, "pay-") {
			pay = append(pay, a)
		}
	}
	do("filter", chromedp.SendKeys(`#filter`, "pay-"),
		until(fmt.Sprintf(`document.querySelector("#count").textContent === "%d of %d agents"`, len(pay), bigFleet)))
	rows := rowsOf(t, ctx)
	if got, w := rowRefs(rows), pageIDs(pay); !slices.Equal(got, w) {
		t.Errorf("filtered by pay-:\n page %v\n loop %v", got, w)
	}
	checkRows(t, l, rows)
	pages := (len(pay) + 49) / 50
	if info := text(t, ctx, "#page-info"); info != fmt.Sprintf("page 1 of %d", pages) {
		t.Errorf("pager %q, want page 1 of %d", info, pages)
	}
	for range pages - 1 {
		do("next page", chromedp.Click(`#next`))
	}
	do("last page", until(fmt.Sprintf(`document.querySelector("#page-info").textContent === "page %d of %d"`, pages, pages)))
	rows = rowsOf(t, ctx)
	if got, w := rowRefs(rows), pageIDs(pay[(pages-1)*50:]); !slices.Equal(got, w) {
		t.Errorf("filtered by pay-, last page:\n page %v\n loop %v", got, w)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#agents tr").length`); n > 51 {
		t.Errorf("%d rows in the table's DOM on the last page, want at most 51", n)
	}
	shot(t, ctx, "2-5000-agents-filtered")
}

// noPageScroll is true when the page does not scroll sideways.
const noPageScroll = `document.documentElement.scrollWidth <= window.innerWidth + 1`

// TestDashboardNarrow shows both pages in a phone-sized viewport: the page
// never scrolls sideways, and the tables scroll inside their own box.
func TestDashboardNarrow(t *testing.T) {
	ctx := newBrowser(t)
	d := newDashLoop(t)
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("narrow page",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(srv.URL+"/si/"),
		chromedp.WaitVisible(`#agents tbody tr`),
		until(`document.querySelector("#count").textContent.startsWith("63 of 63") && document.querySelector("#pending .proposal") !== null`))
	if w := eval[int](t, ctx, `window.innerWidth`); w != 390 {
		t.Fatalf("viewport %d px wide, want 390", w)
	}
	widths := func(where string) {
		t.Helper()
		if !eval[bool](t, ctx, noPageScroll) {
			t.Errorf("%s: the page scrolls sideways: scrollWidth %d, innerWidth 390; widest: %s", where,
				eval[int](t, ctx, `document.documentElement.scrollWidth`),
				eval[string](t, ctx, `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest(".scroll")).slice(0, 5).map(e => e.tagName + "#" + e.id + "." + e.className + " " + Math.round(e.getBoundingClientRect().right)).join(", ")`))
		}
	}
	// The table is wider than the window: it scrolls inside its container,
	// whose scrolled-to end shows the last column.
	usable := func(table string) {
		t.Helper()
		type box struct {
			Overflow                   string
			ScrollWidth, ClientWidth   float64
			BoxLeft, BoxRight          float64
			LastLeft, LastRight, Inner float64
		}
		b := eval[box](t, ctx, fmt.Sprintf(`(() => {
			const t = document.querySelector(%q), s = t.closest(".scroll"), r = s.getBoundingClientRect();
			const out = {Overflow: getComputedStyle(s).overflowX, ScrollWidth: s.scrollWidth, ClientWidth: s.clientWidth, BoxLeft: r.left, BoxRight: r.right, Inner: window.innerWidth};
			s.scrollLeft = s.scrollWidth;
			const th = t.tHead.rows[0].cells, last = th[th.length - 1].getBoundingClientRect();
			out.LastLeft = last.left; out.LastRight = last.right;
			s.scrollLeft = 0;
			return out;
		})()`, table))
		if b.Overflow != "auto" && b.Overflow != "scroll" {
			t.Errorf("%s: its container's overflow-x is %q", table, b.Overflow)
		}
		if b.BoxLeft < 0 || b.BoxRight > b.Inner+1 {
			t.Errorf("%s: its container spans %v..%v of a %v px window", table, b.BoxLeft, b.BoxRight, b.Inner)
		}
		if b.LastLeft < b.BoxLeft-1 || b.LastRight > b.BoxRight+1 {
			t.Errorf("%s: scrolled to its end, the last column (%v..%v) is not inside its box (%v..%v)", table, b.LastLeft, b.LastRight, b.BoxLeft, b.BoxRight)
		}
		t.Logf("%s: %v px of table in a %v px box", table, b.ScrollWidth, b.ClientWidth)
	}
	widths("agents page")
	usable("#agents")
	// The first column, the link to the agent, shows without scrolling.
	if !eval[bool](t, ctx, `(() => { const r = document.querySelector("#agents tbody tr a").getBoundingClientRect(); return r.left >= 0 && r.right <= window.innerWidth && r.width > 0; })()`) {
		t.Error("the agent links are not inside the window")
	}
	shot(t, ctx, "1-agents-narrow")
	do("the pager", chromedp.Click(`#next`), until(`document.querySelector("#page-info").textContent === "page 2 of 2"`))
	widths("agents page 2")

	do("agent page",
		chromedp.Navigate(srv.URL+"/si/#/agent/checkout"),
		chromedp.WaitVisible(`#agent-view`),
		until(`document.querySelectorAll("#timeline rect.marker").length === 3 && document.querySelectorAll("#history tbody tr").length > 0`),
		chromedp.Click(`#timeline rect.marker.confirm`),
		until(`document.querySelector("#marker-detail").textContent.includes("Verdict")`))
	widths("agent page")
	usable("#history")
	usable("#clusters")
	if w := eval[float64](t, ctx, `document.querySelector("#timeline").getBoundingClientRect().width`); w < 300 || w > 390 {
		t.Errorf("the timeline is %v px wide in a 390 px window", w)
	}
	shot(t, ctx, "2-agent-narrow")
	do("proposal page", chromedp.Navigate(srv.URL+"/si/#/agent/review"), until(`document.querySelector("#agent-title").textContent === "review" && document.querySelector("#agent-proposals .proposal") !== null`))
	widths("agent page with a proposal")
	shot(t, ctx, "3-proposal-narrow")
}

// rect is an element's bounding box.
type rect struct{ X, Y, W, H float64 }

// boxes returns the bounding boxes of the elements sel matches.
func boxes(t *testing.T, ctx context.Context, sel string) []rect {
	t.Helper()
	return eval[[]rect](t, ctx, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => { const r = e.getBoundingClientRect(); return {X: r.x, Y: r.y, W: r.width, H: r.height}; })`, sel))
}

// steady records the boxes of the elements sels match and returns a check
// that they did not move; a selector ending in " (top)" compares the
// position and width only, for a row whose own text may grow.
func steady(t *testing.T, ctx context.Context, what string, sels ...string) func() {
	t.Helper()
	get := func(s string) []rect {
		sel, top := strings.CutSuffix(s, " (top)")
		rs := boxes(t, ctx, sel)
		if top {
			for i := range rs {
				rs[i].H = 0
			}
		}
		return rs
	}
	before := map[string][]rect{}
	for _, s := range sels {
		before[s] = get(s)
		if len(before[s]) == 0 {
			t.Fatalf("%s: no %s", what, s)
		}
	}
	return func() {
		t.Helper()
		for _, s := range sels {
			if after := get(s); !slices.Equal(before[s], after) {
				t.Errorf("%s: %s moved:\n before %v\n after  %v", what, s, before[s], after)
			}
		}
	}
}

// TestDashboardNoLayoutJumps checks that live events do not move the
// table's header and first row, nor the timeline and history on the agent
// page.
func TestDashboardNoLayoutJumps(t *testing.T) {
	ctx := newBrowser(t)
	d := newDashLoop(t)
	l := d.l
	srv := serve(t, l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	// The agent page while its change is rolled back.
	do("agent page",
		chromedp.Navigate(srv.URL+"/si/#/agent/checkout"),
		chromedp.WaitVisible(`#conn.live`),
		until(`document.querySelectorAll("#timeline rect.marker").length === 3`))
	do("no first token yet", until(`document.querySelector('#agent-facts [data-fact="first token"] dd').textContent === "–"`))
	check := steady(t, ctx, "rollback on the agent page", "#agent-facts", "#timeline", "#marker-detail", "#clusters thead th", "#history thead th", "#history tbody tr:first-child (top)")
	d.streams = true // the time to first token appears
	d.callsUntil(t, "checkout", errUpstream, si.ChangeRolledBack)
	do("rollback shown", until(`document.querySelector("#timeline rect.marker.rollback") !== null &&
		document.querySelector('#agent-facts [data-fact="change"] dd').textContent === "rolled back" &&
		document.querySelector('#agent-facts [data-fact="first token"] dd').textContent === "10 ms · p90 9.5 ms"`))
	check()
	shot(t, ctx, "1-agent-rolled-back")

	// The table, sorted by calls (checkout first), while checkout and
	// steady get calls and events.
	do("table",
		chromedp.Click(`a[href="#"]`),
		chromedp.WaitVisible(`#list-view`),
		chromedp.Click(`#agents th[data-key="calls"]`),
		chromedp.Click(`#agents th[data-key="calls"]`),
		until(`document.querySelector("#agents tbody tr").dataset.ref === "checkout"`))
	calls := l.Stats("checkout").Calls
	pending := l.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
	if len(pending) != 1 || pending[0].AgentID != "review" {
		t.Fatalf("pending proposals: %+v", pending)
	}
	check = steady(t, ctx, "events on the table", "#list-view h1", "#agents thead tr", "#agents thead th", "#agents tbody tr:first-child", "#agents tbody tr:first-child td")
	d.calls(t, "checkout", 7, nil)
	d.calls(t, "steady", 3, errUpstream)
	if err := l.Approve(pending[0].ID); err != nil { // review: a new config, under verification
		t.Fatal(err)
	}
	for _, id := range []string{"checkout", "steady"} {
		if err := l.MarkCritical(id, true); err != nil {
			t.Fatal(err)
		}
	}
	do("events shown", until(cellIs("checkout", "calls", strconv.Itoa(calls+7))+" && "+
		cellIs("steady", "calls", strconv.Itoa(l.Stats("steady").Calls))+" && "+cellIs("review", "change", "verifying")))
	check()
	checkRows(t, l, rowsOf(t, ctx))
	shot(t, ctx, "2-table-after-events")
}

// TestDashboardTokenReads serves the API without OpenReads: the page asks
// for the token before it shows any data, a wrong token shows an error
// and no data, the right one shows the table and the live stream.
func TestDashboardTokenReads(t *testing.T) {
	ctx := newBrowser(t)
	d := plainLoop(t)
	l := d.l
	for _, id := range []string{"alpha", "beta", "gamma"} {
		d.calls(t, id, 4, nil)
	}
	srv := serve(t, l, admin.Options{Now: d.clk.Now, Token: "t"})
	do := doer(t, ctx)

	do("ask for the token",
		chromedp.Navigate(srv.URL+"/si/"),
		chromedp.WaitVisible(`#token`),
		until(`document.querySelector("#msg").className === "error" && document.querySelector("#msg").textContent.includes("needs the admin token")`))
	if n := eval[int](t, ctx, `document.querySelectorAll("#agents tbody tr").length`); n != 0 {
		t.Errorf("%d rows shown before the token", n)
	}
	if c := text(t, ctx, "#count"); strings.Contains(c, "agents") {
		t.Errorf("count %q shown before the token", c)
	}
	t.Logf("before the token: %q", text(t, ctx, "#msg"))
	shot(t, ctx, "1-token-asked")

	do("wrong token",
		chromedp.SendKeys(`#token`, "wrong"),
		chromedp.Click(`#token-save`),
		until(`document.querySelector("#msg").className === "error" && document.querySelector("#msg").textContent.startsWith("Wrong token") && !document.querySelector("#tokenform").hidden`))
	t.Logf("wrong token: %q", text(t, ctx, "#msg"))
	if n := eval[int](t, ctx, `document.querySelectorAll("#agents tbody tr").length`); n != 0 {
		t.Errorf("%d rows shown with a wrong token", n)
	}
	if live := eval[bool](t, ctx, `document.querySelector("#conn").classList.contains("live")`); live {
		t.Error("the stream is live with a wrong token")
	}
	shot(t, ctx, "2-wrong-token")

	do("right token",
		chromedp.SendKeys(`#token`, "t"),
		chromedp.Click(`#token-save`),
		until(`document.querySelector("#count").textContent === "3 of 3 agents" && document.querySelector("#conn").classList.contains("live")`))
	if hidden := eval[bool](t, ctx, `document.querySelector("#tokenform").hidden && document.querySelector("#msg").textContent === ""`); !hidden {
		t.Errorf("after the right token: form hidden and message cleared = false; message %q", text(t, ctx, "#msg"))
	}
	checkRows(t, l, rowsOf(t, ctx))
	if stored := eval[string](t, ctx, `localStorage.length + sessionStorage.length + document.cookie.length + location.href.indexOf("t=") + ""`); stored != "-1" {
		t.Errorf("the token may be stored: %s", stored)
	}

	// The live stream, read with the token: a new agent and an event about
	// it appear without a reload.
	d.calls(t, "delta", 5, nil)
	if err := l.MarkCritical("delta", true); err != nil {
		t.Fatal(err)
	}
	do("a live event", until(`document.querySelector('#agents tr[data-ref="delta"]') !== null && document.querySelector("#count").textContent === "4 of 4 agents"`))
	checkRows(t, l, rowsOf(t, ctx))
	shot(t, ctx, "3-right-token")
}

// TestDashboardGlossary: the nav's Glossary link shows the glossary, one
// term and definition a row of docs/glossary.md, links reduced to their
// text, at 390 px with no sideways scroll (issue 32).
func TestDashboardGlossary(t *testing.T) {
	ctx := newBrowser(t)
	d := newDashLoop(t)
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("glossary",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(srv.URL+"/si/"),
		chromedp.WaitVisible(`#agents tbody tr`),
		chromedp.Click(`nav a[href="#/glossary"]`),
		until(`document.querySelectorAll("#glossary dt").length > 30`))
	terms := eval[[]string](t, ctx, `[...document.querySelectorAll("#glossary dt")].map(e => e.textContent)`)
	for _, want := range []string{"profile", "analysis window", "canary", "reference", "transient floor"} {
		if !slices.Contains(terms, want) {
			t.Errorf("the glossary lacks %q: %q", want, terms)
		}
	}
	if eval[bool](t, ctx, `document.querySelector("#glossary").textContent.includes("](")`) {
		t.Error("a markdown link shows as markdown")
	}
	if !eval[bool](t, ctx, noPageScroll) || eval[bool](t, ctx, `!document.querySelector("#list-view").hidden`) {
		t.Error("the glossary scrolls sideways, or the agents list still shows")
	}
}
