package admin

import (
	"errors"
	"net/http"

	"github.com/self-improving-loop/selfimprove"
)

// TryRequest is the body of POST /api/agents/{agent}/try: a config to
// apply as a change verified like any other (selfimprove.Loop.Try).
type TryRequest struct {
	// Config is the config to try; the version is assigned by the loop.
	// Required.
	Config ConfigBody `json:"config"`
	// Reason says why, at most 512 bytes. Required.
	Reason string `json:"reason"`
	// Author names who asks, at most 128 bytes; it is added to the
	// reason. Optional.
	Author string `json:"author,omitempty"`
}

// try serves POST /api/agents/{agent}/try: the answer has the change
// under verification; for a propose-only agent, the proposal the config
// was filed as (approve it to apply it), and no change.
func (s *server) try(w http.ResponseWriter, r *http.Request) {
	changeAgent(s, w, r, func(o selfimprove.AgentView, req *TryRequest) (Result, error) {
		if err := req.Config.required(); err != nil {
			return Result{}, err
		}
		cfg, err := req.Config.config()
		if err != nil {
			return Result{}, err
		}
		if err := text("reason", req.Reason, maxReason, true); err != nil {
			return Result{}, err
		}
		if err := text("author", req.Author, 128, false); err != nil {
			return Result{}, err
		}
		reason := req.Reason
		if req.Author != "" {
			reason += " (by " + req.Author + ")"
		}
		ch, err := s.l.Try(o.AgentID, cfg, reason)
		switch {
		case errors.Is(err, selfimprove.ErrFiledForApproval):
			for _, p := range s.l.Proposals(func(p selfimprove.Proposal) bool { return p.ID == ch.ProposalID }) {
				return Result{Proposal: &p}, nil
			}
			return Result{}, err
		case err != nil:
			return Result{}, err
		}
		return Result{Change: &ch}, nil
	})
}
