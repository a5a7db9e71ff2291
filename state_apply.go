package selfimprove

import (
	"errors"
	"fmt"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The analysis's transitions of an agent's state: take the strategy's
// answer, apply a tweak, take it back; pure like the rest of state.go.

// finishAnalysis takes the strategy's answer tw (or its error) to the
// analysis an, made at now: it starts the cooldown, and files tw as a
// proposal or applies it. The state is saved in any case, so that a
// restart does not run the strategy again at once.
func (s *agentState) finishAnalysis(now time.Time, an *Analysis, th Threshold, tw *Tweak, err error, r *ruleBook) (eff effects, _ error) {
	s.analyzing = false
	if an.QualityDrop.Scored == 0 && !an.explore {
		s.coolDown(now, an, th, tw, err) // a fall of quality has its own (see watchScore)
	}
	eff.save = true
	switch {
	case err != nil || tw == nil:
		s.exploreDone(an, nil, r)
		return eff, err
	case tw.Review:
		return eff, s.fileReview(now, an, tw, r, &eff)
	}
	ch, err := s.apply(now, an, tw, r)
	s.exploreDone(an, ch, r)
	if err != nil {
		eff.rejected = errors.Is(err, ErrTweakRejected)
		return eff, err
	}
	s.qualityAnswered(an, ch)
	eff.applied, eff.publish = ch, true
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return eff, nil
}

// coolDown starts the cooldown after the analysis an of failures, whose
// answer was tw (or err).
func (s *agentState) coolDown(now time.Time, an *Analysis, th Threshold, tw *Tweak, err error) {
	s.CooldownUntil = now.UnixNano() + int64(th.Cooldown)
	if _, cl, _ := dominant(an.Clusters); tw == nil && err == nil && sharedOutage(an, cl, defaultOutageAgents) {
		// Nothing to do during an upstream outage: look again soon after.
		s.CooldownUntil = now.UnixNano() + int64(th.Cooldown/outageCooldown)
	}
	s.CooldownEarly, s.early = s.early, false
	s.CooldownCluster = 0
	id := ""
	if tw != nil {
		id = tw.Cluster
	}
	if id == "" {
		id = an.targetID()
	}
	if v, perr := failure.ParseClusterID(id); perr == nil {
		s.CooldownCluster = v
	}
	s.leftOpen = 0
	most := 0
	for _, c := range an.Clusters {
		if v, perr := failure.ParseClusterID(c.ID); perr == nil && v != s.CooldownCluster && c.Count > most {
			s.leftOpen, most = uint16(v), c.Count
		}
	}
}

// fileReview files tw, a reviewed tweak, as a proposal (or folds it into
// the open proposal for its cluster), noting the effects in eff.
func (s *agentState) fileReview(now time.Time, an *Analysis, tw *Tweak, r *ruleBook, eff *effects) error {
	if !tw.Review {
		return nil
	}
	if err := tw.check(); err != nil {
		eff.rejected = true
		return err
	}
	if v, err := failure.ParseClusterID(tw.Cluster); err == nil && uint16(v) == s.leftOpen {
		s.leftOpen = 0 // answered
	}
	if cl := s.clusterByID(tw.Cluster); cl != nil && r.probes.holds(cl.Class) {
		return nil // the account-wide cause's own proposal stands for it
	}
	p, isNew := s.file(an, tw, now, r)
	if p.Status == ProposalPending {
		s.qualityFiled(an, p.ID)
	}
	if isNew {
		eff.proposals = append(eff.proposals, p.clone())
		eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, p))
		eff.save = true
	}
	return nil
}

// apply installs tw as the next config version and starts verifying it.
// It refuses a stale tweak (the config changed since the analysis an), an
// invalid one, the current config, and one that repeats a tweak rolled
// back before.
func (s *agentState) apply(now time.Time, an *Analysis, tw *Tweak, r *ruleBook) (*Change, error) {
	cfg := tw.Config.clone()
	reject := func(format string, args ...any) (*Change, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrTweakRejected}, args...)...)
	}
	if s.Config.Version != an.Config.Version || s.Verifying != nil {
		return nil, ErrStale
	}
	if err := s.refusal(now, tw, r); err != nil {
		return nil, err
	}
	cluster := tw.Cluster
	if cluster == "" {
		cluster = an.targetID()
	}
	for _, rb := range s.refused(now, cluster) {
		if rb.Explored && !an.explore {
			continue // refused to explorations only
		}
		if cfg.Equal(rb.Config) || repeats(s.Config, cfg, rb.Config) {
			return reject("it repeats a tweak rolled back before (version %d: %s)", rb.Config.Version, rb.Reason)
		}
	}
	s.MaxVersion++
	cfg.Version = s.MaxVersion
	n := now.UnixNano()
	win := s.Tracker.stats(n)
	win.Profile, win.Window = an.Stats.Profile, an.Stats.Window
	before := win
	if !r.policy.SeedCompatible {
		before = s.Tracker.regime(s.Tracker.faultStart(n-int64(win.Window)), r.policy.BeforeCalls)
	}
	ch := &Change{
		ID:        r.newID(now),
		AgentID:   s.AgentID,
		From:      s.Config,
		To:        cfg,
		Reason:    freeText(tw.Reason),
		Before:    before,
		Window:    &win,
		Cluster:   cluster,
		AppliedAt: now.UTC(),
		State:     ChangeVerifying,
	}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	v := *ch
	s.endVerify()
	s.Verifying = &v
	var eff effects
	s.install(cfg, &eff)
	return ch, nil
}

// refusal is why apply refuses tw whatever the agent's verification
// and rolled-back tweaks: out of bounds, the current config, or on a
// dead route; nil when none of these.
func (s *agentState) refusal(now time.Time, tw *Tweak, r *ruleBook) error {
	if err := tw.check(); err != nil {
		return err
	}
	if tw.Config.Equal(s.Config) {
		return fmt.Errorf("%w: it is the current config", ErrTweakRejected)
	}
	if why, dead := s.deadAt(tw.Config.Route, now.UnixNano(), r); dead && s.routeName(tw.Config.Route, r) != s.routeName(s.Config.Route, r) {
		return fmt.Errorf("%w: route %q is dead: %s", ErrTweakRejected, s.routeName(tw.Config.Route, r), why)
	}
	return nil
}

// check refuses, with ErrTweakRejected, a tweak whose stored fields are
// out of bounds: its config (see Config; its Version is ignored) and its
// cluster, empty or a cluster ID. Its texts are cut and its confidence
// clamped instead.
func (tw *Tweak) check() error {
	if err := tw.Config.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrTweakRejected, err)
	}
	if v, err := failure.ParseClusterID(tw.Cluster); tw.Cluster != "" && (err != nil || failure.FormatClusterID(v) != tw.Cluster) {
		return fmt.Errorf("%w: tweak.cluster: %s, not a cluster ID (16 lower-case hex digits)", ErrTweakRejected, quoteCut(tw.Cluster, maxQuoted))
	}
	return nil
}

// unapply takes back ch, just applied, when it could not be saved: a
// change that cannot be recorded is not made. It reports whether it did.
func (s *agentState) unapply(ch *Change) bool {
	v := s.Verifying
	if v == nil || v.ID != ch.ID {
		return false
	}
	s.endVerify()
	var eff effects
	s.install(ch.From.clone(), &eff)
	s.History = s.History[:len(s.History)-1]
	return true
}
