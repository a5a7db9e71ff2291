package admin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// kicked reports, and clears, a read's ask for a background pass.
func kicked(kick <-chan struct{}) bool {
	select {
	case <-kick:
		return true
	default:
		return false
	}
}

// TestOverviewBackground: with a background pass (SampleEvery positive),
// a read of the overview after the first reads no state file for stale
// keys nor for the summaries it keeps: a minute later it shows the
// summaries kept and asks for a pass, which reads them again; a summary
// lateAges minutes old is read by the read itself; an agent loaded,
// failing and evicted between two reads, unseen, shows in trouble once
// the pass that read asked for ran.
func TestOverviewBackground(t *testing.T) {
	const n, page = 20, "limit=5"
	dir := t.TempDir()
	clk := fakeclock.New(ovStart)
	saveAgents(t, dir, clk, n)
	s, cs := overviewServer(t, dir, clk, Options{Now: clk.Now}, selfimprove.WithMaxAgents(2))
	kick := s.ov.wake()
	read := func(what string, wantLoads int64, wantKick bool) Overview {
		t.Helper()
		before := cs.Loads.Load()
		var o Overview
		if err := json.Unmarshal(readOverview(t, s, page).Body.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		if loads, k := cs.Loads.Load()-before, kicked(kick); loads != wantLoads || k != wantKick {
			t.Errorf("%s: %d state loads, asked for a pass: %v; want %d, %v", what, loads, k, wantLoads, wantKick)
		}
		return o
	}
	// The first read reads every key, then the page's summaries.
	if o := read("the first read", n+5, false); o.Total != n || len(o.Agents) != 5 {
		t.Fatalf("the first read: total %d, %d agents", o.Total, len(o.Agents))
	}
	clk.Advance(time.Minute)
	read("a minute later", 0, true)
	before := cs.Loads.Load()
	s.refreshStale()
	if loads := cs.Loads.Load() - before; loads != 15 { // the agents with failures in their window
		t.Errorf("the background pass: %d state loads, want 15", loads)
	}
	for _, e := range s.ov.order[:5] {
		if e.sum == nil || e.at != clk.Now().UnixNano() {
			t.Errorf("%s after the pass: summary %v, read at %v", e.id, e.sum != nil, time.Unix(0, e.at))
		}
	}
	read("after the pass", 0, false)
	clk.Advance(lateAges * time.Minute)
	read("three minutes without a pass", 5, true)
	s.refreshStale()

	target := "agent-00004" // healthy: its 5 calls succeeded
	calls(s.l, target, 0, 8)
	for _, id := range []string{"agent-00008", "agent-00012", "agent-00016"} {
		calls(s.l, id, 1, 0)
	}
	if a := read("after an eviction unseen", 0, true).Agents[0]; a.ID == target {
		t.Errorf("the read itself read %s again: %+v", target, a)
	}
	s.refreshStale()
	// The read reads target's summary: the page never showed it before.
	if a := read("after the pass", 1, false).Agents[0]; a.ID != target || a.Healthy {
		t.Errorf("after %s's failures out of memory and a pass, first: %+v", target, a)
	}
}
