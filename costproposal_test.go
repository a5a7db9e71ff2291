package selfimprove_test

import (
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// costRiseEnv is qualityEnv with policy p: a change to route "b" under
// verification, after 40 calls scored 0.9 at a cost of 1.
func costRiseEnv(t *testing.T, p si.RollbackPolicy) *env {
	t.Helper()
	e := newEnv(t, si.WithStrategy(&tweakStrategy{tweaks: []si.Config{{Route: "b"}}}), si.WithRollbackPolicy(p))
	scoringOn(t, e.l)
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		e.scoredCall("a", 0.9, 1, time.Millisecond)
	}
	e.call("a", errBoom, time.Millisecond)
	if rep := e.call("a", errBoom, time.Millisecond); rep.Improvement == nil {
		t.Fatalf("no change applied: %+v", rep)
	}
	return e
}

// rollbackAt5x makes calls at 5× the cost until one rolls the change
// back, and returns it.
func rollbackAt5x(t *testing.T, e *env) *si.Change {
	t.Helper()
	for i := range 100 {
		rep := e.scoredCall("a", 0.9, 5, time.Millisecond)
		if rep.Confirmed != nil {
			t.Fatalf("call %d confirmed a change at 5× the cost: %s", i+1, rep.Confirmed.Verdict)
		}
		if ch := rep.Rollback; ch != nil {
			if !strings.Contains(ch.Verdict, "cost per successful call rose 400%") {
				t.Fatalf("rolled back on call %d: %q", i+1, ch.Verdict)
			}
			return ch
		}
	}
	t.Fatal("a change at 5× the cost was not rolled back")
	return nil
}

// TestCostRiseRolledBackByDefault: without ProposeCostRise, a change
// that raises the cost 5× at equal quality is rolled back, and no
// proposal is filed.
func TestCostRiseRolledBackByDefault(t *testing.T) {
	e := costRiseEnv(t, si.RollbackPolicy{MinBeforeCalls: -1})
	rollbackAt5x(t, e)
	if ps := e.l.Proposals(nil); len(ps) != 0 {
		t.Fatalf("proposals filed: %+v", ps)
	}
}

// TestCostRiseFiledForApproval: with ProposeCostRise, the change is
// rolled back and filed as a proposal naming the cost; approved, it is
// applied again with the cost accepted, verified on success and quality,
// not rolled back for its cost, and confirmed.
func TestCostRiseFiledForApproval(t *testing.T) {
	e := costRiseEnv(t, si.RollbackPolicy{MinBeforeCalls: -1, ProposeCostRise: true})
	rb := rollbackAt5x(t, e)
	if c := e.l.Config("a"); c.Route != "" {
		t.Fatalf("config %+v after the rollback", c)
	}
	ps := e.l.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
	if len(ps) != 1 || !ps[0].CostRise || ps[0].Config == nil || ps[0].Config.Route != "b" ||
		!strings.Contains(ps[0].Rationale, "cost per successful call rose 400%") {
		t.Fatalf("proposals %+v", ps)
	}
	if err := e.l.Approve(ps[0].ID); err != nil {
		t.Fatal(err) // the rolled-back config is refused to the strategy, not to this approval
	}
	v, _ := e.l.View("a")
	if v.Config.Route != "b" || v.Change == nil || v.Change.State != si.ChangeVerifying || !v.Change.CostAccepted || v.Change.ID == rb.ID {
		t.Fatalf("after approval: config %+v, change %+v", v.Config, v.Change)
	}
	for i := range 400 {
		rep := e.scoredCall("a", 0.9, 5, time.Millisecond)
		if rep.Rollback != nil {
			t.Fatalf("call %d rolled back the approved change: %s", i+1, rep.Rollback.Verdict)
		}
		if ch := rep.Confirmed; ch != nil {
			if ch.ProposalID != ps[0].ID || !ch.CostAccepted {
				t.Errorf("confirmed %+v", ch)
			}
			p := e.l.Proposals(func(p si.Proposal) bool { return p.ID == ps[0].ID })
			if len(p) != 1 || p[0].Status != si.ProposalConfirmed {
				t.Errorf("proposal %+v", p)
			}
			return
		}
	}
	t.Fatal("the approved change was not confirmed in 400 calls")
}
