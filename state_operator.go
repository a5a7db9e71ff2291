package selfimprove

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The transitions of an agent's state that a person's actions make, the
// state machine's side of operator.go: a config set by hand, a rewind
// to an earlier version, settings, and the proposals filed for a
// person's approval (file, approve, reject); pure like the rest of
// state.go. At its end, what the getters read, which changes nothing.

// setConfig installs cfg as the operator's baseline, superseding a change
// under verification.
func (s *agentState) setConfig(now time.Time, cfg Config, r *ruleBook) (eff effects) {
	if s.Verifying != nil {
		s.decide(now, ChangeSuperseded, "an operator set another config before the verdict; superseded by SetConfig", &eff)
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
	eff.applied, eff.save = ch, true
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
	tw := &Tweak{Config: old, Reason: fmt.Sprintf("rewind to v%d: %s", version, reason)}
	if err := s.refusal(now, tw, r); err != nil {
		return nil, eff, err // refused before it supersedes anything: a refused rewind changes nothing
	}
	if s.Verifying != nil {
		s.decide(now, ChangeSuperseded, "an operator rewound to an earlier version before the verdict; superseded by a rewind", &eff)
	}
	s.operatorRoute(old, r, &eff)
	n := now.UnixNano()
	st := s.stats(n)
	an := &Analysis{Config: s.Config, Stats: st}
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

// routeCopy returns a copy of the agent's route state (nil: none).
func (s *agentState) routeCopy() *routeState {
	if s.Route == nil {
		return nil
	}
	c := *s.Route
	return &c
}

// operatorRoute ends a stay away from the primary when an operator's
// verified change (Try, Rewind) installs cfg on another route: the
// operator chose the route. A change that keeps the route leaves the
// agent where it is on its ladder: away, it goes on probing its primary
// (but returns only once the change is decided), and a rollback leaves it
// away, as it was.
func (s *agentState) operatorRoute(cfg Config, r *ruleBook, eff *effects) {
	if s.routeName(cfg.Route, r) != s.routeName(s.Config.Route, r) {
		s.stayHome(eff)
	}
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

// file files tw as a proposal, or folds it into the open proposal for
// the same cluster. It returns the proposal and whether it is new.
func (s *agentState) file(an *Analysis, tw *Tweak, now time.Time, r *ruleBook) (*Proposal, bool) {
	var cl *Cluster
	for i := range an.Clusters {
		if an.Clusters[i].ID == tw.Cluster {
			cl = &an.Clusters[i]
		}
	}
	if cl == nil && len(an.Clusters) > 0 {
		cl = &an.Clusters[0]
	}
	var suggest *Config
	if !tw.Config.Equal(s.Config) {
		c := tw.Config.clone()
		c.Version = 0
		suggest = &c
	}
	// The tweak's texts were scrubbed when the strategy answered (or are
	// the loop's own): cut here, not scrubbed again (see loopText).
	p := Proposal{
		AgentID: s.AgentID, Rule: loopText(tw.Rule), Config: suggest, Rationale: loopText(tw.Reason),
		Confidence: min(max(tw.Confidence, 0), 1), Status: ProposalPending, Updated: now.UTC(),
	}
	if cl != nil {
		p.Class, p.RootCause, p.ClusterID, p.Signature = cl.Class, cl.RootCause, cl.ID, freeText(cl.Signature)
		p.Count, p.Examples = cl.Count, boundTexts(cl.Examples, maxExample, failure.MaxText)
	}
	same := func(q *Proposal) bool {
		return q.ClusterID == p.ClusterID && q.Rule == p.Rule &&
			(q.Config == nil) == (p.Config == nil) && (q.Config == nil || q.Config.Equal(*p.Config))
	}
	for i := range s.Proposals {
		q := &s.Proposals[i]
		if q.ClusterID != p.ClusterID || q.CostRise {
			continue // a cost rise's proposal is a person's call of its own
		}
		switch {
		case q.Status == ProposalPending:
			// New evidence, and the newer suggestion.
			q.Count, q.Examples, q.Updated = p.Count, p.Examples, p.Updated
			q.Config, q.Rule, q.Rationale, q.Confidence, q.Class, q.RootCause = p.Config, p.Rule, p.Rationale, p.Confidence, p.Class, p.RootCause
			return q, false
		case q.Status.open(), q.Status == ProposalRejected && same(q):
			// Being acted on, or the same suggestion was turned down.
			return q, false
		}
	}
	p.ID, p.Created = r.newID(now), now.UTC()
	return s.addProposal(p), true
}

// addProposal appends p to the agent's proposals, dropping the oldest
// closed one (or else the oldest pending one) beyond maxProposals, and
// returns it as kept.
func (s *agentState) addProposal(p Proposal) *Proposal {
	s.Proposals = append(s.Proposals, p)
	if len(s.Proposals) > maxProposals {
		i := slices.IndexFunc(s.Proposals, func(q Proposal) bool { return !q.Status.open() })
		if i < 0 {
			i = slices.IndexFunc(s.Proposals, func(q Proposal) bool { return q.Status == ProposalPending })
		}
		if i >= 0 {
			s.Proposals = slices.Delete(s.Proposals, i, i+1)
		} else {
			s.Proposals = s.Proposals[1:]
		}
	}
	return &s.Proposals[len(s.Proposals)-1]
}

// proposal returns the agent's proposal with the ID, or nil.
func (s *agentState) proposal(id string) *Proposal {
	for i := range s.Proposals {
		if s.Proposals[i].ID == id {
			return &s.Proposals[i]
		}
	}
	return nil
}

// closeProposal records the outcome of a change on the proposal that made
// it, if any.
func (s *agentState) closeProposal(ch *Change, now time.Time) {
	if ch.ProposalID == "" {
		return
	}
	p := s.proposal(ch.ProposalID)
	if p == nil {
		return
	}
	switch ch.State {
	case ChangeConfirmed:
		p.Status = ProposalConfirmed
	case ChangeRolledBack:
		p.Status = ProposalRolledBack
	case ChangeSuperseded:
		p.Status = ProposalSuperseded
	default:
		return
	}
	p.Note, p.Updated = ch.Verdict, now.UTC()
}

// approve approves the pending proposal id: a rule-only one is marked
// approved; one with a config is applied like a tweak and verified.
func (s *agentState) approve(now time.Time, id string, r *ruleBook) (*Change, effects, error) {
	var eff effects
	p := s.proposal(id)
	switch {
	case p == nil:
		return nil, eff, fmt.Errorf("%w: %s", ErrProposalNotFound, id)
	case p.Status != ProposalPending:
		return nil, eff, fmt.Errorf("%w: %s is %s", ErrProposalState, id, p.Status)
	case p.Config == nil:
		p.Status, p.Updated = ProposalApproved, now.UTC()
		eff.save = true
		eff.event(proposalEvent(r.newID(now), now, EventProposalApproved, p))
		return nil, eff, nil
	case s.Verifying != nil:
		return nil, eff, fmt.Errorf("%w: approve %s after change %s is decided", ErrVerifying, id, s.Verifying.ID)
	}
	an := &Analysis{Config: s.Config, Stats: s.stats(now.UnixNano())}
	rejected := s.Rejected
	if p.CostRise || strings.HasPrefix(p.Rationale, triedByOperator) {
		// Refused for its cost, which the person accepts; or a config an
		// operator tried (Try under propose-only), which may be one rolled
		// back before, as Try's own may.
		s.Rejected = nil
	}
	ch, err := s.apply(now, an, &Tweak{Config: *p.Config, Reason: "approved proposal: " + p.Rationale, Cluster: p.ClusterID}, r)
	s.Rejected = rejected
	if err != nil {
		return nil, eff, err
	}
	s.Verifying.ProposalID, ch.ProposalID = p.ID, p.ID
	s.qualityApproved(p.ID, ch)
	s.Verifying.CostAccepted, ch.CostAccepted = p.CostRise, p.CostRise
	p.Status, p.ChangeID, p.Updated = ProposalApplied, ch.ID, now.UTC()
	eff.applied, eff.publish, eff.save = ch, true, true
	eff.event(proposalEvent(r.newID(now), now, EventProposalApproved, p))
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return ch, eff, nil
}

// unapprove takes back the approval of proposal id and its change ch,
// when they could not be saved.
func (s *agentState) unapprove(id string, ch *Change) {
	s.unapply(ch)
	if p := s.proposal(id); p != nil {
		p.Status, p.ChangeID = ProposalPending, ""
	}
}

// reject closes the proposal id, pending or approved with only a rule,
// with the reason; the failure memory learns that its config was turned
// down for the cluster.
func (s *agentState) reject(now time.Time, id, reason string, r *ruleBook) (effects, error) {
	var eff effects
	p := s.proposal(id)
	switch {
	case p == nil:
		return eff, fmt.Errorf("%w: %s", ErrProposalNotFound, id)
	case p.Status != ProposalPending && !(p.Status == ProposalApproved && p.Config == nil):
		return eff, fmt.Errorf("%w: %s is %s", ErrProposalState, id, p.Status)
	}
	p.Status, p.Note, p.Updated = ProposalRejected, freeText(reason), now.UTC()
	eff.save = true
	eff.event(proposalEvent(r.newID(now), now, EventProposalRejected, p))
	if p.Config != nil && p.ClusterID != "" {
		eff.fixes = append(eff.fixes, fixNote{p.ClusterID, Fix{AgentID: s.AgentID, ProposalID: p.ID, From: s.Config.clone(),
			To: p.Config.clone(), Reason: p.Rationale, State: FixRejected, Time: now.UTC()}})
	}
	return eff, nil
}

// triedByOperator begins the reason of a config an operator tried (Try),
// and the rationale of the proposal Try files under propose-only.
const triedByOperator = "tried by operator: "

// try applies cfg, an operator's, as the next version verified like any
// change (Loop.Try); under propose-only it files it as a pending
// proposal instead (filed). It refuses while a change is verified. The
// rolled-back list does not apply: an operator chose it.
func (s *agentState) try(now time.Time, cfg Config, reason string, r *ruleBook) (ch *Change, filed *Proposal, eff effects, err error) {
	cfg = cfg.clone()
	cfg.Version = s.Config.Version // for the comparison; apply numbers it
	switch {
	case s.Verifying != nil:
		return nil, nil, eff, fmt.Errorf("%w: try the config once change %s (v%d) is decided", ErrVerifying, s.Verifying.ID, s.Verifying.To.Version)
	case cfg.Equal(s.Config):
		return nil, nil, eff, fmt.Errorf("%w: it is the current config", ErrTweakRejected)
	}
	why := loopText(triedByOperator + freeText(reason))
	if r.proposeOnly(s) {
		cfg.Version = 0
		p := s.addProposal(Proposal{ID: r.newID(now), AgentID: s.AgentID, Config: &cfg, Rationale: why, Confidence: 1,
			Status: ProposalPending, Created: now.UTC(), Updated: now.UTC()})
		eff.proposals = append(eff.proposals, p.clone())
		eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, p))
		eff.save = true
		c := p.clone()
		return nil, &c, eff, nil
	}
	var route routeState // the agent's place on its ladder, if the config is refused
	if s.Route != nil {
		route = *s.Route
	}
	s.operatorRoute(cfg, r, &eff)
	an := &Analysis{Config: s.Config, Stats: s.stats(now.UnixNano())}
	rejected := s.Rejected
	s.Rejected = nil
	ch, err = s.apply(now, an, &Tweak{Config: cfg, Reason: why}, r)
	s.Rejected = rejected
	if err != nil {
		if s.Route != nil {
			*s.Route = route // refused: still away, as it was
		}
		return nil, nil, effects{}, err
	}
	eff.applied, eff.publish, eff.save = ch, true, true
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return ch, nil, eff, nil
}

// thresholdAt resolves the threshold at time now; it changes nothing.
func (s *agentState) thresholdAt(now int64) (Threshold, Profile) {
	day := s.Tracker.Day // sum moves the ring on to now: a copy's
	return s.thresholdFor(day.sum(now))
}

// readTracker returns, for a getter, a copy of s's tracker as the
// threshold at now sees it (its window at the threshold's width), and
// the threshold: a getter moves and resizes the copy, so that reading an
// agent changes nothing of it (TestGettersChangeNothing).
func (s *agentState) readTracker(now int64) (tracker, Threshold, Profile) {
	th, prof := s.thresholdAt(now)
	t := s.Tracker
	t.Win.resize(slotWidth(th.Window))
	return t, th, prof
}

// statsAt returns the window's stats at time now, for a getter; it
// changes nothing.
func (s *agentState) statsAt(now int64) Stats {
	t, th, prof := s.readTracker(now)
	return s.statsOf(&t, now, th, prof)
}

// healthAt returns the health score at time now, for a getter; it
// changes nothing.
func (s *agentState) healthAt(now int64) float64 {
	t, _, _ := s.readTracker(now)
	return t.health(now)
}

// readWidth is the width of the window's buckets at now, for a getter:
// the threshold's, which the live window takes at the next transition.
func (s *agentState) readWidth(now int64) int64 {
	th, _ := s.thresholdAt(now)
	return slotWidth(th.Window)
}
