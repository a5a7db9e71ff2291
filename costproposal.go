package selfimprove

import (
	"fmt"
	"time"
)

// A change that raised the cost per successful call, filed for a
// person's approval (RollbackPolicy.ProposeCostRise, docs/quality.md).

// costOnly reports whether v, p's verdict on e, rolls the change back for
// its cost alone, and p files such a change for approval.
func (p RollbackPolicy) costOnly(e Evidence, v Verdict) bool {
	if !p.ProposeCostRise || v.Decision != DecisionRollback {
		return false
	}
	reason, _ := p.withDefaults().costRise(e)
	return reason != "" && reason == v.Reason
}

// fileCostRise files ch, just rolled back for its cost alone, as a
// proposal to apply it again: a pending one with the same config is
// brought up to date instead.
func (s *agentState) fileCostRise(now time.Time, ch *Change, r *ruleBook, eff *effects) {
	cfg := ch.To.clone()
	cfg.Version = 0
	why := freeText(fmt.Sprintf("%s; approve to apply it again and accept the cost (the change: %s)", ch.Verdict, ch.Reason))
	for i := range s.Proposals {
		q := &s.Proposals[i]
		if q.CostRise && q.Status == ProposalPending && q.Config != nil && q.Config.Equal(cfg) {
			q.Rationale, q.Updated = why, now.UTC()
			return
		}
	}
	p := Proposal{ID: r.newID(now), AgentID: s.AgentID, ClusterID: ch.Cluster, Config: &cfg, Rationale: why,
		Confidence: 1, Status: ProposalPending, CostRise: true, Created: now.UTC(), Updated: now.UTC()}
	if cl := s.clusterByID(ch.Cluster); cl != nil {
		p.Class, p.Signature = cl.Class, freeText(cl.Sig)
	}
	kept := s.addProposal(p)
	eff.proposals = append(eff.proposals, kept.clone())
	eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, kept))
}
