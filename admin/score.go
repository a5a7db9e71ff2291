package admin

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
)

// score serves POST /api/agents/{agent}/score: Token scores any agent,
// ScoreToken the agents of Options.ScoreAgents. It checks the body, the
// agent's right and the rate bound before it reads the agent.
func (s *server) score(w http.ResponseWriter, r *http.Request, who role) {
	var raw []byte
	refuse := func(reason int, err error) {
		s.lim.refused[reason].Add(1)
		s.fail(w, nullNamed(raw, err))
	}
	var req ScoreRequest
	raw, err := decode(r.Body, &req, false)
	if err != nil {
		refuse(refusedInvalid, err)
		return
	}
	id, err := strconv.ParseUint(req.CallID, 16, 64)
	switch {
	case len(req.CallID) != 16 || err != nil:
		refuse(refusedInvalid, bad("call_id", "call_id must be 16 hexadecimal digits (Report.CallID)"))
		return
	case req.Score == nil:
		refuse(refusedInvalid, bad("score", "score is required, in [0, 1]"))
		return
	case !(*req.Score >= 0 && *req.Score <= 1): // before the rate: a refused score books nothing
		refuse(refusedInvalid, bad("score", "score must be in [0, 1]"))
		return
	case len(req.Key) > 256:
		refuse(refusedInvalid, bad("key", "key is over 256 bytes"))
		return
	}
	agent := r.PathValue("agent")
	if err := checkID(agent); err != nil {
		refuse(refusedInvalid, err)
		return
	}
	if err := s.lim.allowed(who, agent, "agent"); err != nil {
		refuse(refusedNotAllowed, err)
		return
	}
	if wait, ok := s.rate.take(1, s.o.Now()); !ok { // scores share the intake's bound
		s.lim.refused[refusedRate].Add(1)
		tooMany(w, wait, "score", fmt.Sprintf("admin.Options.OutcomeRate (%g outcomes and scores a second)", s.o.OutcomeRate))
		return
	}
	o, ok := s.agentOf(w, r)
	if !ok {
		return
	}
	res, err := s.l.ScoreCall(o.AgentID, id, *req.Score, scoreKey(req.Key))
	if err != nil && res.Version == 0 {
		s.fail(w, err)
		return
	}
	if err != nil { // booked, and what it decided could not be saved
		s.o.Logger.Warn("selfimprove admin: a score's decision was not saved", "agent", o.AgentID, "error", err)
	}
	if !res.Duplicate {
		s.lim.scored.Add(1)
	}
	writeJSON(w, http.StatusOK, scoreResult(res))
}

// scoreKey is the idempotency key of a ScoreRequest's key (0: none):
// FNV-1a, never 0 for a key given.
func scoreKey(key string) uint64 {
	if key == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return max(h.Sum64(), 1)
}
