package selfimprove

import (
	"fmt"
	"time"
)

// The operator's transitions of an agent's state: a config set by hand,
// a rewind to an earlier version, and settings; pure like the rest of
// state.go.

// setConfig installs cfg as the operator's baseline, superseding a change
// under verification.
func (s *agentState) setConfig(now time.Time, cfg Config, r *ruleBook) (eff effects) {
	if s.Verifying != nil {
		s.decide(now, ChangeSuperseded, "superseded by SetConfig", &eff)
	}
	s.stayHome(&eff)
	cfg = cfg.clone()
	s.MaxVersion++
	cfg.Version = s.MaxVersion
	ch := &Change{
		ID: r.newID(now), AgentID: s.AgentID, From: s.Config, To: cfg, Reason: "set by operator",
		Before: s.Tracker.stats(now.UnixNano()), AppliedAt: now.UTC(), DecidedAt: now.UTC(), State: ChangeConfirmed,
	}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	s.install(cfg, &eff)
	eff.save = true
	eff.event(newEvent(r.newID(now), now, EventConfigSet, ch))
	return eff
}

// configOf returns the config the agent ran as version v: the current
// one, a backup, or one of a kept change.
func (s *agentState) configOf(v int) (Config, bool) {
	if s.Config.Version == v {
		return s.Config, true
	}
	for i := len(s.History) - 1; i >= 0; i-- {
		if s.History[i].Version == v {
			return s.History[i], true
		}
	}
	for i := len(s.Changes) - 1; i >= 0; i-- {
		if c := s.Changes[i]; c.To.Version == v {
			return c.To, true
		} else if c.From.Version == v {
			return c.From, true
		}
	}
	return Config{}, false
}

// rewind installs the config of an earlier version as the next version,
// verified like any change, superseding a change under verification. The
// rolled-back list does not apply: an operator chose it.
func (s *agentState) rewind(now time.Time, version int, reason string, r *ruleBook) (*Change, effects, error) {
	var eff effects
	old, ok := s.configOf(version)
	switch {
	case !ok:
		return nil, eff, fmt.Errorf("%w: agent %q has no version %d", ErrUnknownVersion, s.AgentID, version)
	case version == s.Config.Version:
		return nil, eff, fmt.Errorf("%w: version %d is the current config", ErrTweakRejected, version)
	}
	if s.Verifying != nil {
		s.decide(now, ChangeSuperseded, "superseded by a rewind", &eff)
	}
	s.stayHome(&eff)
	n := now.UnixNano()
	st := s.stats(n)
	an := &Analysis{Config: s.Config, Stats: st}
	tw := &Tweak{Config: old, Reason: fmt.Sprintf("rewind to v%d: %s", version, reason)}
	// apply refuses rolled-back configs; a rewind is the operator's call.
	rejected := s.Rejected
	s.Rejected = nil
	ch, err := s.apply(now, an, tw, r)
	s.Rejected = rejected
	if err != nil {
		return nil, eff, err
	}
	eff.applied, eff.publish, eff.save = ch, true, true
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return ch, eff, nil
}

// operatorSet applies an operator setting f, and notes it with an event
// of type t.
func (s *agentState) operatorSet(now time.Time, t EventType, msg string, f func(*agentState), r *ruleBook) (eff effects) {
	f(s)
	s.threshold(now.UnixNano()) // resize the window at once
	eff.save = true
	eff.event(&Event{ID: r.newID(now), Time: now.UTC(), Type: t, AgentID: s.AgentID, Message: msg})
	return eff
}
