package selfimprove_test

import (
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestProposeOnlyPerAgent: SetProposeOnly puts one agent in propose-only
// mode: its tweak is filed as a proposal while another agent's is
// applied; the mode survives a restart; the approved proposal is
// verified like any change, and confirmed on healthy calls; taken out of
// the mode, an agent's tweak is applied.
func TestProposeOnlyPerAgent(t *testing.T) {
	st := &tweakStrategy{tweaks: []si.Config{{Route: "b"}, {Route: "b"}, {Route: "c"}}}
	opts := []si.Option{si.WithStrategy(st), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1, MinCalls: 20})}
	e := newEnv(t, opts...)
	if err := e.l.SetProposeOnly("gated", true); err != nil {
		t.Fatal(err)
	}
	e.l.Close()
	e.open(opts...) // the mode is saved with the agent
	if v, _ := e.l.View("gated"); !v.ProposeOnly {
		t.Fatal("propose-only lost across a restart")
	}
	e.calls("free", 2, errBoom, time.Millisecond)
	if c := e.l.Config("free"); c.Route != "b" {
		t.Fatalf("agent not in propose-only mode: config %+v, want the tweak applied", c)
	}
	e.calls("gated", 2, errBoom, time.Millisecond)
	if c := e.l.Config("gated"); c.Version != 1 {
		t.Fatalf("config v%d applied to an agent in propose-only mode", c.Version)
	}
	ps := e.l.Proposals(func(p si.Proposal) bool { return p.AgentID == "gated" && p.Status == si.ProposalPending })
	if len(ps) != 1 || ps[0].Config == nil || ps[0].Config.Route != "b" {
		t.Fatalf("proposals %+v", ps)
	}
	if err := e.l.Approve(ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.l.View("gated"); v.Config.Route != "b" || v.Change == nil || v.Change.State != si.ChangeVerifying {
		t.Fatalf("after approval: config %+v, change %+v", v.Config, v.Change)
	}
	e.calls("gated", 40, nil, time.Millisecond)
	if v, _ := e.l.View("gated"); v.Change == nil || v.Change.State != si.ChangeConfirmed || v.Change.ProposalID != ps[0].ID {
		t.Fatalf("approved change not verified and confirmed: %+v", v.Change)
	}
	// Taken out of the mode, an agent's tweaks are applied again.
	if err := e.l.SetProposeOnly("toggled", true); err != nil {
		t.Fatal(err)
	}
	if err := e.l.SetProposeOnly("toggled", false); err != nil {
		t.Fatal(err)
	}
	e.calls("toggled", 2, errBoom, time.Millisecond)
	if c := e.l.Config("toggled"); c.Route != "c" {
		t.Fatalf("out of propose-only mode: config %+v, want the tweak applied", c)
	}
}

// Proposals is a getter: it lists the proposals of an agent not in
// memory without loading it, so that under WithMaxAgents it never evicts
// another (an agent evicted loses what is never saved: its scores' keys,
// for one). Before, it loaded every agent with proposals: with one agent
// in memory, each Proposals evicted it for the agent that had filed one.
func TestProposalsLoadsNoAgent(t *testing.T) {
	st := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	opts := []si.Option{si.WithStrategy(st), si.WithMaxAgents(1), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1, ProposeOnly: true})}
	e := newEnv(t, opts...)
	e.calls("gated", 2, errBoom, time.Millisecond) // files a proposal
	e.calls("other", 1, nil, time.Millisecond)     // evicts gated
	agents, evictions := e.l.Metrics().Agents, e.l.Metrics().Evictions
	for range 3 {
		ps := e.l.Proposals(nil)
		if len(ps) != 1 || ps[0].AgentID != "gated" || ps[0].Status != si.ProposalPending {
			t.Fatalf("proposals %+v, want gated's", ps)
		}
	}
	if m := e.l.Metrics(); m.Agents != agents || m.Evictions != evictions {
		t.Fatalf("Proposals: %d agents in memory (before, %d), %d evicted", m.Agents, agents, m.Evictions-evictions)
	}
	if v, _, _ := e.l.ViewCalls("other", nil); !v.Loaded {
		t.Fatal("other is no longer in memory")
	}
	// Approve still finds it (and loads it: a decision, not a read).
	if err := e.l.Approve(e.l.Proposals(nil)[0].ID); err != nil {
		t.Fatal(err)
	}
	if c := e.l.Config("gated"); c.Route != "b" {
		t.Fatalf("after approval: %+v", c)
	}
}
