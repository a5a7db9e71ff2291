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
