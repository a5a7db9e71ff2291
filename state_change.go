package selfimprove

import (
	"fmt"
	"time"
)

// The life of a change in the per-agent state machine: installed,
// verified, then confirmed or rolled back. Pure, like state.go.

// verifying returns the change under verification with its counts so far.
func (s *agentState) verifying() Change {
	ch := *s.Verifying
	ch.After = s.Verify.stats()
	s.qualityOf(ch.To.Version).fill(&ch.After)
	if s.Control.Calls > 0 {
		c := s.Control.stats()
		s.qualityOf(ch.From.Version).fill(&c)
		ch.Control = &c
	}
	return ch
}

// evidence is what the policy judges the change under verification by.
func (s *agentState) evidence() Evidence {
	v := s.Verifying
	e := Evidence{Before: v.Before, After: s.Verify.stats(), Control: s.Control.stats(), StreakControl: s.Streak.stats(),
		Raised: raisesBound(v.From, v.To), Comparable: newStats(int(s.Verify.Alike), 0, time.Duration(s.Verify.AlikeLatency))}
	if w := v.Window; w != nil {
		e.Window = *w
	}
	s.addQuality(&e)
	return e
}

// endVerify ends verification.
func (s *agentState) endVerify() {
	s.Verifying, s.Verify, s.Control, s.Streak = nil, counts{}, counts{}, streak{}
}

// install makes c the config in force, as a new generation.
func (s *agentState) install(c Config, eff *effects) {
	s.Config = c
	s.Gen++
	eff.publish = true
}

// decide closes the change under verification with state and reason.
func (s *agentState) decide(now time.Time, state ChangeState, reason string, eff *effects) *Change {
	ch := s.verifying()
	ch.State, ch.Verdict, ch.DecidedAt = state, loopText(reason), now.UTC()
	s.endVerify()
	eff.remember(&ch, FixOutcome(state), ch.DecidedAt)
	s.Changes = appendBounded(s.Changes, ch, maxChanges)
	s.closeProposal(&ch, now)
	return &ch
}

// rollback restores the config before the change under verification and
// refuses the change from then on; when that config's route is dead, it
// rolls forward instead (see rollForward). The next candidate for the
// fault may follow after retryPause, not the whole cooldown.
func (s *agentState) rollback(now time.Time, reason string, r *ruleBook, eff *effects) {
	if s.rollForward(now, reason, r, eff) {
		return
	}
	s.rollbackTo(now, reason, r, eff)
}

// retryPause is the longest wait after a rollback before the strategy
// may run again for the agent.
const retryPause = 10 * time.Minute

// rollbackTo restores the config before the change under verification.
// A rolled-back return to the primary is not refused: the probes' growing
// interval spaces the next attempt.
func (s *agentState) rollbackTo(now time.Time, reason string, r *ruleBook, eff *effects) {
	returning := s.returning()
	ch := s.decide(now, ChangeRolledBack, reason, eff)
	s.install(ch.From.clone(), eff)
	if n := len(s.History); n > 0 && s.History[n-1].Version == ch.From.Version {
		s.History = s.History[:n-1]
	}
	s.moved(ch, ChangeRolledBack, now, r, eff)
	if !returning {
		rb := Tweak{Config: ch.To, Reason: loopText(ch.Reason), Cluster: ch.Cluster}
		if r.policy.RefuseFor > 0 {
			rb.Until = now.Add(r.policy.RefuseFor).UTC()
		}
		s.Rejected = appendBounded(s.Rejected, rb, maxRejected)
		s.CooldownUntil = min(s.CooldownUntil, now.Add(retryPause).UnixNano())
	}
	eff.decided, eff.decision, eff.save = ch, EventRolledBack, true
	eff.event(newEvent(r.newID(now), now, EventRolledBack, ch))
}

// confirm ends verification, keeping the change; under MethodCanary,
// calls stop running the previous config.
func (s *agentState) confirm(now time.Time, reason string, r *ruleBook, eff *effects) {
	ch := s.decide(now, ChangeConfirmed, reason, eff)
	s.moved(ch, ChangeConfirmed, now, r, eff)
	eff.decided, eff.decision, eff.save, eff.publish = ch, EventChangeConfirmed, true, true
	eff.event(newEvent(r.newID(now), now, EventChangeConfirmed, ch))
}

// judge decides the change under verification on the evidence as it
// stands (the counts pooled over the fleet): confirm, roll back or wait.
func (s *agentState) judge(now time.Time, r *ruleBook, eff *effects) {
	if s.Verifying == nil {
		return
	}
	p := r.policy
	if s.Verifying.CostAccepted {
		p.MaxCostRise = -1 // a person accepted the cost
	}
	e := s.evidence()
	s.deliverable(&e, now.UnixNano(), r)
	v := p.Decide(e)
	reason := namedVerdict(v.Reason, s.Verifying.To.Version)
	switch v.Decision {
	case DecisionRollback:
		id := s.Verifying.ID
		s.rollback(now, reason, r, eff)
		if ch := eff.decided; ch != nil && ch.ID == id && ch.State == ChangeRolledBack {
			if p.costOnly(e, v) {
				s.fileCostRise(now, ch, r, eff)
			}
			if n := len(s.Rejected); n > 0 && noGain(e, v) && s.Rejected[n-1].Config.Equal(ch.To) {
				s.Rejected[n-1].Explored = true // refused to explorations only
			}
		}
	case DecisionConfirm:
		s.confirm(now, reason, r, eff)
	}
}

// next is the agent's next step at now.
func (s *agentState) next(now int64, r *ruleBook) (string, time.Time) {
	at := func(t int64) time.Time { return time.Unix(0, t).UTC() }
	switch rs := s.Route; {
	case rs != nil && rs.Hold != "":
		return fmt.Sprintf("held for %s: one probe per interval", rs.Hold), at(s.CircuitOpenUntil)
	case s.Verifying != nil:
		return fmt.Sprintf("verifying v%d: %s", s.Verifying.To.Version, s.Verifying.Reason), time.Time{}
	case rs != nil && rs.Away:
		return fmt.Sprintf("probe route %q to return to it", s.routeName(rs.Home, r)), at(max(rs.ProbeAt, now))
	}
	what := "the strategy, when failures cross the threshold"
	if route, ok := s.nextLive(now, r); ok {
		what = fmt.Sprintf("route %q if the current one keeps failing, else the strategy", route)
	}
	if s.CooldownUntil > now {
		return "cooling down; next: " + what, at(s.CooldownUntil)
	}
	return "watching; next: " + what, time.Time{}
}
