package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/stream"
)

const dashToken = "right-token-0123456789"

var errUpstream = errors.New("upstream 503: service unavailable")

// browser returns the path of a Chromium or Chrome on PATH; without one
// the test skips locally and fails in CI.
func browser(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH (CI is set): install with: apt-get install -y chromium")
	}
	t.Skip("no chromium on PATH: install with: apt-get install -y chromium")
	return ""
}

// outDir is where screenshots go (git-ignored).
func outDir(t *testing.T) string {
	d := filepath.Join("out", t.Name())
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// shot saves a screenshot of the whole page as out/<test>/name.png and
// returns it (PNG).
func shot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(outDir(t), name+".png")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d KB)", p, len(b)>>10)
	return b
}

// dashLoop is a Loop with scripted traffic on a fake clock: "checkout"
// had a change confirmed and has a second one under verification;
// "review" has a pending proposal; "steady" only succeeds; "bulk-NNN"
// fill the table beyond a page.
type dashLoop struct {
	l   *si.Loop
	clk *fakeclock.Clock
	// streams: the calls report their first token, 10 ms in (their
	// config has a first-token timeout).
	streams bool
}

func (d *dashLoop) calls(t *testing.T, agent string, n int, err error) {
	t.Helper()
	for range n {
		d.l.ExecuteWithImprovement(context.Background(), agent, func(ctx context.Context, _ si.Config) error {
			if d.streams {
				d.clk.Advance(10 * time.Millisecond)
				stream.FirstToken(ctx)
				d.clk.Advance(20 * time.Millisecond)
				return err
			}
			d.clk.Advance(30 * time.Millisecond)
			return err
		})
		d.clk.Advance(time.Second)
	}
}

func newDashLoop(t *testing.T) *dashLoop {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	strategy := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		c := a.Config
		c.Timeout += 2 * time.Second
		c.MaxAttempts = 2
		return &si.Tweak{Config: c, Reason: "raise the timeout", Review: a.AgentID == "review", Rule: "raise the upstream quota", Confidence: 0.8}, nil
	})
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(strategy),
		si.WithFlushInterval(0), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		si.WithDefaultConfig(si.Config{FirstTokenTimeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := &dashLoop{l: l, clk: clk}
	th := si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}
	for _, id := range []string{"checkout", "review"} {
		if err := l.SetThreshold(id, th); err != nil {
			t.Fatal(err)
		}
	}
	d.calls(t, "steady", 30, nil)
	for i := range 60 {
		d.calls(t, fmt.Sprintf("bulk-%03d", i), 2+i%5, nil)
		if i%7 == 0 {
			d.calls(t, fmt.Sprintf("bulk-%03d", i), 1, errUpstream)
		}
	}
	// checkout: a fault, a change, its confirmation, a second fault and
	// change, left under verification.
	d.calls(t, "checkout", 20, nil)
	d.calls(t, "checkout", 4, errUpstream)
	d.waitChanges(t, "checkout", 1)
	d.callsUntil(t, "checkout", nil, si.ChangeConfirmed)
	d.clk.Advance(2 * time.Minute)
	d.calls(t, "checkout", 4, errUpstream)
	d.waitChanges(t, "checkout", 2)
	// review: a fault and a proposal.
	d.calls(t, "review", 20, nil)
	d.calls(t, "review", 4, errUpstream)
	waitLoop(t, l, "a proposal for review", func() bool { return len(l.Proposals(nil)) > 0 })
	chs := l.Changes("checkout")
	if chs[0].State != si.ChangeConfirmed || chs[1].State != si.ChangeVerifying {
		t.Fatalf("checkout changes: %s, %s", chs[0].State, chs[1].State)
	}
	return d
}

// callsUntil makes calls of agent that return err until its latest
// change is in state want, for at most 200 calls.
func (d *dashLoop) callsUntil(t *testing.T, agent string, err error, want si.ChangeState) {
	t.Helper()
	for range 200 {
		d.calls(t, agent, 1, err)
		if ch := d.l.Changes(agent); len(ch) > 0 && ch[len(ch)-1].State == want {
			return
		}
	}
	t.Fatalf("%s: the latest change is not %s after 200 calls", agent, want)
}

// waitChanges waits for the strategy's change to be applied (analysis
// runs in the background).
func (d *dashLoop) waitChanges(t *testing.T, agent string, n int) {
	t.Helper()
	waitLoop(t, d.l, fmt.Sprintf("%s: %d changes", agent, n), func() bool { return len(d.l.Changes(agent)) >= n })
}

func rowsOf(t *testing.T, ctx context.Context) []row {
	t.Helper()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](readRows))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// row is a table row as the page shows it.
type row struct {
	Ref     string `json:"ref"`
	Success string `json:"success"`
	Calls   string `json:"calls"`
	Version string `json:"version"`
	Change  string `json:"change"`
	Pending string `json:"pending"`
}

// readRows reads the table's rows, each cell found by its column's key
// (the header's data-key), so that a new column moves none of them.
const readRows = `(() => {
	const keys = [...document.querySelectorAll("#agents thead th")].map((th) => th.dataset.key);
	const v = (tr, k) => tr.cells[keys.indexOf(k)].dataset.v;
	return [...document.querySelectorAll("#agents tbody tr")].map((tr) => ({ref: tr.dataset.ref,
		success: v(tr, "success"), calls: v(tr, "calls"), version: v(tr, "version"), change: v(tr, "change"), pending: v(tr, "pending")}));
})()`

// cellIs is a JavaScript test that the table's cell of agent ref in the
// column key (the header's data-key) has the value v (its data-v).
func cellIs(ref, key, v string) string {
	return fmt.Sprintf(`(() => {
		const i = [...document.querySelectorAll("#agents thead th")].findIndex((th) => th.dataset.key === %q);
		const tr = document.querySelector('#agents tr[data-ref="%s"]');
		return i >= 0 && tr !== null && tr.cells[i].dataset.v === %q;
	})()`, key, ref, v)
}

// checkRows compares the page's rows with the loop's numbers.
func checkRows(t *testing.T, l *si.Loop, rows []row) {
	t.Helper()
	for _, r := range rows {
		st := l.Stats(r.Ref)
		cfg := l.Config(r.Ref)
		o, _ := l.View(r.Ref)
		want := row{Ref: r.Ref, Success: strconv.FormatFloat(st.SuccessRate, 'g', -1, 64), Calls: strconv.Itoa(st.Calls),
			Version: strconv.Itoa(cfg.Version), Pending: strconv.Itoa(o.Proposals)}
		if o.Change != nil {
			want.Change = string(o.Change.State)
		}
		if r != want {
			t.Errorf("row %+v, loop %+v", r, want)
		}
	}
}

// TestDashboard drives the dashboard in headless Chromium against a loop
// with scripted traffic.
func TestDashboard(t *testing.T) {
	ctx := newBrowser(t)
	d := newDashLoop(t)
	srv, reqs := serveCounted(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	checkDashboardTable(t, ctx, srv, d.l)
	checkDashboardAgent(t, ctx, d.l)
	checkDashboardRollback(t, ctx, d, reqs)
	checkDashboardApprove(t, ctx, d.l)
	checkDashboardReconnect(t, ctx, srv, d)
}

// checkDashboardTable checks the table of TestDashboard's 63 agents: pages
// of 50, a filter and a sort, numbers equal to the loop's.
func checkDashboardTable(t *testing.T, ctx context.Context, srv *httptest.Server, l *si.Loop) {
	t.Helper()
	do := doer(t, ctx)
	do("open the page",
		chromedp.Navigate(srv.URL+"/si/"),
		chromedp.WaitVisible(`#agents tbody tr`),
		chromedp.WaitVisible(`#conn.live`),
		until(`document.querySelector("#count").textContent.startsWith("63 of 63")`))
	rows := rowsOf(t, ctx)
	if pageInfo := text(t, ctx, "#page-info"); len(rows) != 50 || pageInfo != "page 1 of 2" {
		t.Errorf("%d rows, %q, want 50 rows, page 1 of 2", len(rows), pageInfo)
	}
	checkRows(t, l, rows)
	do("next page", chromedp.Click(`#next`), until(`document.querySelectorAll("#agents tbody tr").length === 13`))
	checkRows(t, l, rowsOf(t, ctx))
	// Filtered, then sorted by calls, descending.
	do("filter and sort",
		chromedp.SendKeys(`#filter`, "e"),
		until(`document.querySelectorAll("#agents tbody tr").length === 3`),
		chromedp.Click(`#agents th[data-key="calls"]`),
		chromedp.Click(`#agents th[data-key="calls"]`))
	rows = rowsOf(t, ctx)
	if len(rows) != 3 || rows[0].Ref != "checkout" || rows[1].Ref != "steady" || rows[2].Ref != "review" {
		t.Errorf("filtered and sorted by calls: %+v", rows)
	}
	checkRows(t, l, rows)
	shot(t, ctx, "1-agents")
}

// checkDashboardAgent opens checkout's page from the table: markers for the
// first change, its confirmation and the second change; a marker shows the
// diff and the evidence.
func checkDashboardAgent(t *testing.T, ctx context.Context, l *si.Loop) {
	t.Helper()
	do := doer(t, ctx)
	do("agent page",
		chromedp.Click(`#agents a[href="#/agent/checkout"]`),
		chromedp.WaitVisible(`#agent-view`),
		until(`document.querySelectorAll("#timeline rect.marker").length === 3`))
	kinds, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline rect.marker")].map(e => e.dataset.kind)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(kinds, ",") != "change,confirm,change" {
		t.Errorf("markers %v", kinds)
	}
	do("click a marker", chromedp.Click(`#timeline rect.marker.confirm`), until(`document.querySelector("#marker-detail").textContent.includes("Verdict")`))
	detail := text(t, ctx, "#marker-detail")
	confirmed := l.Changes("checkout")[0]
	for _, s := range []string{"Change confirmed", "v1 → v2", "Verdict: " + confirmed.Verdict, "max_attempts", "Before: ", fmt.Sprintf("After: %d calls, %d failures", confirmed.After.Calls, confirmed.After.Failures)} {
		if !strings.Contains(detail, s) {
			t.Errorf("marker detail lacks %q: %s", s, detail)
		}
	}
	shot(t, ctx, "2-agent")
}

// checkDashboardRollback rolls back checkout's change while its page is
// open: the rollback shows there and then in the table, from the event
// stream: without a reload of the page or of the agent list, with one read
// of the agent at most per event the loop recorded about it.
func checkDashboardRollback(t *testing.T, ctx context.Context, d *dashLoop, reqs *requests) {
	t.Helper()
	do := doer(t, ctx)
	l := d.l
	const detail, list = "/api/agents/checkout", "/api/agents"
	eval[bool](t, ctx, `window.__e2eSamePage = true`) // gone if the page reloads
	before := reqs.snapshot()
	last := l.Events(si.EventFilter{Limit: 1})
	d.callsUntil(t, "checkout", errUpstream, si.ChangeRolledBack)
	shown := func(what, js string) {
		t.Helper()
		do(what, until(js))
		events := l.Events(si.EventFilter{After: last[0].ID, AgentIDs: []string{"checkout"}, Limit: 1000})
		reads := reqs.count(detail) - before[detail]
		t.Logf("%s: %d reads of the agent for %d events about it", what, reads, len(events))
		if reads < 1 || reads > len(events) {
			t.Errorf("%s: %d reads of the agent for %d events about it: want 1 to one per event", what, reads, len(events))
		}
		if n := reqs.count(list) - before[list]; n != 0 || !eval[bool](t, ctx, `window.__e2eSamePage === true`) {
			t.Errorf("%s: the page reloaded or read the agent list again (%d reads)", what, n)
		}
	}
	shown("rollback in the timeline", `document.querySelector("#timeline rect.marker.rollback") !== null &&
		document.querySelector('#history tr[data-version="3"] td:nth-child(4)').textContent === "rolled back"`)
	shot(t, ctx, "3-agent-rolled-back")
	do("back to the table", chromedp.Click(`a[href="#"]`), chromedp.WaitVisible(`#list-view`))
	shown("rollback in the table", cellIs("checkout", "change", "rolled_back"))
	checkRows(t, l, rowsOf(t, ctx))
}

// checkDashboardApprove approves review's proposal from the table. With a
// wrong token: an error, and nothing changes.
func checkDashboardApprove(t *testing.T, ctx context.Context, l *si.Loop) {
	t.Helper()
	do := doer(t, ctx)
	pending := l.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
	if len(pending) != 1 || pending[0].AgentID != "review" {
		t.Fatalf("pending proposals: %+v", pending)
	}
	before := l.Config("review")
	do("approve with a wrong token",
		chromedp.Click(`#pending button.approve`),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, "wrong-token"),
		chromedp.Click(`#token-save`),
		until(`document.querySelector("#msg").className === "error" && document.querySelector("#msg").textContent.includes("wrong token")`))
	t.Logf("wrong token: %q", text(t, ctx, "#msg"))
	if got := l.Config("review"); got.Version != before.Version {
		t.Errorf("a wrong token changed the config: v%d → v%d", before.Version, got.Version)
	}
	if p := l.Proposals(func(p si.Proposal) bool { return p.ID == pending[0].ID }); p[0].Status != si.ProposalPending {
		t.Errorf("a wrong token changed the proposal: %s", p[0].Status)
	}
	shot(t, ctx, "4-wrong-token")

	// Approve with the right token: the loop applies the proposal, and
	// the page shows it without a reload.
	do("approve",
		chromedp.Click(`#pending button.approve`),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, dashToken),
		chromedp.Click(`#token-save`),
		until(`document.querySelector("#msg").className === "ok"`))
	after := l.Config("review")
	if after.Version != before.Version+1 || after.Timeout != pending[0].Config.Timeout || after.MaxAttempts != 2 {
		t.Errorf("after Approve: %+v, want v%d with the proposal's config %+v", after, before.Version+1, pending[0].Config)
	}
	if msg := text(t, ctx, "#msg"); !strings.Contains(msg, fmt.Sprintf("now runs config v%d", after.Version)) {
		t.Errorf("message %q", msg)
	}
	do("the approval shown", until(cellIs("review", "version", strconv.Itoa(after.Version))+` &&
		document.querySelector("#pending").textContent === "None."`))
	checkRows(t, l, rowsOf(t, ctx))
	shot(t, ctx, "5-approved")
}

// checkDashboardReconnect cuts the table's connection: the page says so,
// and comes back live.
func checkDashboardReconnect(t *testing.T, ctx context.Context, srv *httptest.Server, d *dashLoop) {
	t.Helper()
	do := doer(t, ctx)
	l := d.l
	srv.CloseClientConnections()
	do("reconnecting notice", until(`document.querySelector("#conn").classList.contains("reconnecting")`, chromedp.WithPollingInterval(20*time.Millisecond)))
	if seen := text(t, ctx, "#conn"); seen != "reconnecting…" {
		t.Errorf("notice %q", seen)
	}
	shot(t, ctx, "6-reconnecting")
	do("live again", until(`document.querySelector("#conn").classList.contains("live")`))
	// Events after the reconnection still arrive.
	d.calls(t, "steady", 3, nil)
	if err := l.MarkCritical("steady", true); err != nil {
		t.Fatal(err)
	}
	do("update after reconnecting", until(cellIs("steady", "calls", "33")))
	checkRows(t, l, rowsOf(t, ctx))
}
