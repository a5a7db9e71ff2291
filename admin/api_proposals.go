// The proposals' endpoints of the admin API: list, approve, reject.

package admin

import (
	"net/http"
	"slices"

	"github.com/self-improving-loop/selfimprove"
)

// listProposals serves GET /api/proposals.
func (s *server) listProposals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	statuses := q["status"]
	for _, st := range statuses {
		switch selfimprove.ProposalStatus(st) {
		case selfimprove.ProposalPending, selfimprove.ProposalApproved, selfimprove.ProposalApplied,
			selfimprove.ProposalConfirmed, selfimprove.ProposalRolledBack, selfimprove.ProposalSuperseded, selfimprove.ProposalRejected:
		default:
			s.fail(w, bad("status", "unknown status %q", st))
			return
		}
	}
	agents, hasAgent := q["agent"]
	ps := s.l.Proposals(func(p selfimprove.Proposal) bool {
		return (statuses == nil || slices.Contains(statuses, string(p.Status))) &&
			(!hasAgent || slices.Contains(agents, p.AgentID))
	})
	writeJSON(w, http.StatusOK, ProposalList{Proposals: nonNil(ps)})
}

// proposal returns the proposal named by the request's {id} segment.
func (s *server) proposal(id string) (selfimprove.Proposal, bool) {
	ps := s.l.Proposals(func(p selfimprove.Proposal) bool { return p.ID == id })
	if len(ps) == 0 {
		return selfimprove.Proposal{}, false
	}
	return ps[0], true
}

// approve serves POST /api/proposals/{id}/approve.
func (s *server) approve(w http.ResponseWriter, r *http.Request) {
	if _, err := decode(r.Body, &ApproveRequest{}, true); err != nil {
		s.fail(w, err)
		return
	}
	s.decideProposal(w, r, func(id string) error { return s.l.Approve(id) })
}

// reject serves POST /api/proposals/{id}/reject.
func (s *server) reject(w http.ResponseWriter, r *http.Request) {
	var req RejectRequest
	raw, err := decode(r.Body, &req, false)
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := text("reason", req.Reason, maxReason, true); err != nil {
		s.fail(w, nullNamed(raw, err))
		return
	}
	s.decideProposal(w, r, func(id string) error { return s.l.Reject(id, req.Reason) })
}

// decideProposal runs an approval or rejection and answers with the
// proposal as it stands after it.
func (s *server) decideProposal(w http.ResponseWriter, r *http.Request, f func(id string) error) {
	id := r.PathValue("id")
	if _, ok := s.proposal(id); !ok {
		s.fail(w, selfimprove.ErrProposalNotFound)
		return
	}
	if err := f(id); err != nil {
		s.fail(w, err)
		return
	}
	p, _ := s.proposal(id)
	res := Result{Proposal: &p}
	if p.ChangeID != "" {
		for _, ch := range s.l.Changes(p.AgentID) {
			if ch.ID == p.ChangeID {
				res.Change = &ch
			}
		}
	}
	s.done(w, p.AgentID, res)
}
