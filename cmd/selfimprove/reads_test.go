package main

import (
	"slices"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// checkReads runs every read command with base (the flags that reach the
// loop) and checks the answers against l, the loop's own.
func checkReads(t *testing.T, base []string, env []string, l *si.Loop) {
	t.Helper()
	arg := func(a ...string) []string { return append(slices.Clone(a), base...) }
	checkStatusAndAgents(t, env, arg, l)
	checkAgentAlpha(t, env, arg, l)
	checkProposals(t, env, arg, l)
	checkSimilarAndEvents(t, env, arg, l)
}

// checkStatusAndAgents checks status, in JSON and as text, and agents, all
// and by prefix; arg appends checkReads's flags to a command line.
func checkStatusAndAgents(t *testing.T, env []string, arg func(...string) []string, l *si.Loop) {
	t.Helper()
	want := slices.Sorted(l.Agents())
	var st StatusView
	ok(t, env, &st, arg("status", "--json")...)
	if got := ids(st.Agents); !slices.Equal(got, want) {
		t.Errorf("status agents = %q, want %q", got, want)
	}
	if len(st.Events) == 0 {
		t.Error("status: no recent events")
	}
	text := ok(t, env, nil, arg("status")...)
	for _, s := range []string{"3 agents", "AGENT", "alpha", "Recent events:"} {
		if !strings.Contains(text, s) {
			t.Errorf("status: no %q in\n%s", s, text)
		}
	}

	var list admin.AgentList
	ok(t, env, &list, arg("agents", "--json")...)
	if got := ids(list.Agents); !slices.Equal(got, want) {
		t.Errorf("agents = %q, want %q", got, want)
	}
	ok(t, env, &list, arg("agents", "--prefix", "al", "--json")...)
	if got := ids(list.Agents); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("agents --prefix al = %q", got)
	}
}

// checkAgentAlpha checks agent alpha, in JSON and as text.
func checkAgentAlpha(t *testing.T, env []string, arg func(...string) []string, l *si.Loop) {
	t.Helper()
	var d admin.AgentDetail
	ok(t, env, &d, arg("agent", "alpha", "--json")...)
	if d.ID != "alpha" || d.Config.Version != l.Config("alpha").Version || !d.Critical || len(d.Changes) != len(l.Changes("alpha")) || len(d.Clusters) == 0 {
		t.Errorf("agent alpha = v%d critical=%v changes %d clusters %d; loop v%d changes %d",
			d.Config.Version, d.Critical, len(d.Changes), len(d.Clusters), l.Config("alpha").Version, len(l.Changes("alpha")))
	}
	text := ok(t, env, nil, arg("agent", "alpha")...)
	for _, s := range []string{"Agent:", "Versions:", "v2 (current)", "strategy", "Failure clusters:", "upstream <n>",
		"QUALITY", "0.750 (20 scored)", "0.002 (20 costed)", "Routes:"} {
		if !strings.Contains(text, s) {
			t.Errorf("agent alpha: no %q in\n%s", s, text)
		}
	}
}

// checkProposals checks proposals, all of them, filtered, and as text.
func checkProposals(t *testing.T, env []string, arg func(...string) []string, l *si.Loop) {
	t.Helper()
	var props admin.ProposalList
	ok(t, env, &props, arg("proposals", "--json")...)
	var wantIDs, gotIDs []string
	for _, p := range l.Proposals(nil) {
		wantIDs = append(wantIDs, p.ID)
	}
	for _, p := range props.Proposals {
		gotIDs = append(gotIDs, p.ID)
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("proposals = %q, want %q", gotIDs, wantIDs)
	}
	ok(t, env, &props, arg("proposals", "--agent", "beta", "--status", "pending", "--json")...)
	if len(props.Proposals) != 1 || props.Proposals[0].AgentID != "beta" {
		t.Errorf("proposals of beta = %+v", props.Proposals)
	}
	if text := ok(t, env, nil, arg("proposals")...); !strings.Contains(text, "pending") {
		t.Errorf("proposals:\n%s", text)
	}
}

// checkSimilarAndEvents checks similar and events, in JSON and as text.
func checkSimilarAndEvents(t *testing.T, env []string, arg func(...string) []string, l *si.Loop) {
	t.Helper()
	var sim admin.SimilarList
	ok(t, env, &sim, arg("similar", "upstream 503 unavailable", "-k", "2", "--json")...)
	wantSim := l.Similar("upstream 503 unavailable", 2)
	if len(sim.Memories) != len(wantSim) || len(wantSim) == 0 || sim.Memories[0].Cluster != wantSim[0].Cluster || len(sim.Memories[0].Fixes) != len(wantSim[0].Fixes) {
		t.Errorf("similar = %+v, want %+v", sim.Memories, wantSim)
	}
	if text := ok(t, env, nil, arg("similar", "upstream 503")...); !strings.Contains(text, "SIMILARITY") ||
		len(wantSim[0].Fixes) > 0 && !strings.Contains(text, "  fix  ") || strings.Contains(text, "e-") {
		t.Errorf("similar: want each fix on a line of its own, no exponent:\n%s", text)
	}

	var evs admin.EventList
	ok(t, env, &evs, arg("events", "--json", "--agent", "alpha", "--type", "critical_set", "--since", "2h")...)
	if n := len(evs.Events); n == 0 || evs.Events[n-1].AgentID != "alpha" || evs.Events[n-1].Type != si.EventCriticalSet {
		t.Errorf("events of alpha, critical_set = %+v", evs.Events)
	}
	if text := ok(t, env, nil, arg("events", "--limit", "5")...); strings.Count(text, "\n") != 6 {
		t.Errorf("events --limit 5: want a header and 5 rows:\n%s", text)
	}
}
