package admin_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// ovID names agent i of the agents on disk.
func ovID(i int) string { return fmt.Sprintf("agent-%05d", i) }

// agentsOnDisk saves n agents in a FileStore in dir: agent i made 5
// calls, i%4 of them failed (a health of 1, 0.8, 0.6 or 0.4).
func agentsOnDisk(t testing.TB, dir string, clk *fakeclock.Clock, n int) {
	t.Helper()
	l, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil), si.WithFlushInterval(0),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}), si.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		traffic(t, l, nil, ovID(i), 5-i%4, i%4)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// openCounting opens the FileStore in dir with a counting wrapper, and a
// Loop on it with opts (admin.OpenCounting).
func openCounting(t testing.TB, dir string, clk *fakeclock.Clock, opts ...si.Option) (*si.Loop, *admin.DiskLoads) {
	t.Helper()
	return admin.OpenCounting(t, dir, clk, opts...)
}

// overviewOf reads GET /api/overview?query from h.
func overviewOf(t testing.TB, h http.Handler, query string) admin.Overview {
	t.Helper()
	req := httptest.NewRequest("GET", "/api/overview?"+query, nil)
	req.Host = "localhost"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/overview?%s: %d %s", query, rec.Code, rec.Body)
	}
	var out admin.Overview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// ids returns the IDs of the agents of o.
func ids(o admin.Overview) []string {
	var out []string
	for _, a := range o.Agents {
		out = append(out, a.ID)
	}
	return out
}

// wantOrder returns every agent of l in the overview's order, from
// their views.
func wantOrder(l *si.Loop) []string {
	h := admin.Handler(l, admin.Options{SampleEvery: -1}) // a fresh read of every agent
	req := httptest.NewRequest("GET", "/api/agents?limit=1000", nil)
	req.Host = "localhost"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var list admin.AgentList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		panic(err)
	}
	rank := map[string]int{admin.StateTrouble: 0, admin.StateWatch: 1, admin.StateOK: 2}
	all := list.Agents
	slices.SortFunc(all, func(a, b admin.AgentSummary) int {
		return cmp.Or(cmp.Compare(rank[a.State], rank[b.State]), cmp.Compare(a.Current.SuccessRate, b.Current.SuccessRate), cmp.Compare(a.ID, b.ID))
	})
	out := make([]string, len(all))
	for i, a := range all {
		out[i] = a.ID
	}
	return out
}

// TestOverviewReadsPage: with n agents on disk, a read of the overview
// after the first loads the states of its page, not of every agent, and
// its order is that of the agents' views.
func TestOverviewReadsPage(t *testing.T) {
	const n, page = 200, 10
	dir := t.TempDir()
	clk := fakeclock.New(t0)
	agentsOnDisk(t, dir, clk, n)
	l, cs := openCounting(t, dir, clk)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	first := overviewOf(t, h, "limit=10")
	if first.Total != n || cs.Loads.Load() > n+page {
		t.Fatalf("the first read: total %d, %d loads; want %d, at most %d", first.Total, cs.Loads.Load(), n, n+page)
	}
	want := wantOrder(l)
	for _, off := range []int{0, 20, 190, 195} {
		before := cs.Loads.Load()
		got := overviewOf(t, h, fmt.Sprintf("limit=%d&offset=%d", page, off))
		if loads := cs.Loads.Load() - before; loads > page {
			t.Errorf("offset %d: %d state loads for a page of %d of %d agents", off, loads, page, n)
		}
		if got.Total != n {
			t.Errorf("offset %d: total %d, want %d", off, got.Total, n)
		}
		if d := gocmp.Diff(want[off:min(off+page, n)], ids(got)); d != "" {
			t.Errorf("offset %d: the page's agents (-want +got):\n%s", off, d)
		}
	}
}

// TestOverviewFresh: new calls, an operator's SetConfig and critical
// mark, and a decision of the loop show in the next read of the
// overview, for agents in memory.
func TestOverviewFresh(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	for _, id := range []string{"a", "b", "c", "d"} {
		traffic(t, l, clk, id, 10, 0)
	}
	if got := ids(overviewOf(t, h, "")); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("healthy agents: %v", got)
	}
	traffic(t, l, clk, "c", 0, 10) // new calls
	o := overviewOf(t, h, "")
	if a := o.Agents[0]; a.ID != "c" || a.Healthy || a.Health != l.Health("c") {
		t.Fatalf("after c's failures, first: %+v", a)
	}
	if err := l.SetConfig("d", si.Config{Timeout: 3 * time.Second}); err != nil { // an operator's action
		t.Fatal(err)
	}
	if err := l.MarkCritical("b", true); err != nil {
		t.Fatal(err)
	}
	for _, a := range overviewOf(t, h, "").Agents {
		if a.ID == "d" && a.ConfigVersion != 2 || a.ID == "b" && (!a.Critical || a.Profile != si.ProfileCritical) {
			t.Errorf("after the operator's actions: %+v", a)
		}
	}
	// A decision: alpha's strategy changes its config at once; its
	// failures then roll it back.
	if err := l.SetThreshold("alpha", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		traffic(t, l, clk, "alpha", 20, 4)
		v, _ := l.View("alpha")
		var got *admin.OverviewAgent
		o := overviewOf(t, h, "")
		for i := range o.Agents {
			if o.Agents[i].ID == "alpha" {
				got = &o.Agents[i]
			}
		}
		var state si.ChangeState
		if v.Change != nil {
			state = v.Change.State
		}
		if got == nil || got.ConfigVersion != v.Config.Version || got.ChangeState != state || got.Health != v.Health {
			t.Fatalf("alpha in the overview: %+v; its view: version %d, change %q, health %v", got, v.Config.Version, state, v.Health)
		}
	}
	if len(l.Changes("alpha")) == 0 {
		t.Fatal("alpha has no change")
	}
}

// TestOverviewFreshOutOfMemory: an agent loaded, failing and evicted
// between two reads of the overview shows in trouble at the next read;
// once its failures have left its window, it shows healthy again after a
// minute (Options.SampleEvery negative).
func TestOverviewFreshOutOfMemory(t *testing.T) {
	const n = 20
	dir := t.TempDir()
	clk := fakeclock.New(t0)
	agentsOnDisk(t, dir, clk, n)
	l, cs := openCounting(t, dir, clk, si.WithMaxAgents(2))
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	overviewOf(t, h, "limit=5")
	target := ovID(4) // healthy: its 5 calls succeeded
	traffic(t, l, clk, target, 0, 8)
	for _, id := range []string{ovID(8), ovID(12), ovID(16)} {
		traffic(t, l, clk, id, 1, 0)
	}
	for v := range l.Views() {
		if v.AgentID == target {
			t.Fatalf("%s is still in memory", target)
		}
	}
	before := cs.Loads.Load()
	o := overviewOf(t, h, "limit=5")
	if a := o.Agents[0]; a.ID != target || a.Healthy {
		t.Fatalf("after %s's failures out of memory, first: %+v", target, a)
	}
	if d := gocmp.Diff(wantOrder(l)[:5], ids(o)); d != "" {
		t.Errorf("the page (-want +got):\n%s", d)
	}
	t.Logf("that read loaded %d states", cs.Loads.Load()-before)
	clk.Advance(72 * time.Hour)
	o = overviewOf(t, h, fmt.Sprintf("limit=%d", n))
	if d := gocmp.Diff(wantOrder(l), ids(o)); d != "" {
		t.Errorf("three days later (-want +got):\n%s", d)
	}
	before = cs.Loads.Load()
	overviewOf(t, h, "limit=5")
	if loads := cs.Loads.Load() - before; loads > 5 {
		t.Errorf("a read with nothing stale loaded %d states for a page of 5", loads)
	}
}
