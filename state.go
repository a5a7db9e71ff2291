package selfimprove

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// This file is the per-agent state machine: agentState and every
// transition of it. A transition takes the time and the rules as
// arguments, never reads a clock, never does IO and never takes a lock:
// the Loop calls it with the agent's lock held and carries out the
// effects it returns (log, notify, remember, save) after unlocking.
//
// Lock order, for the Loop that drives it: createMu → saveMu → agent.mu.
// No other lock (the failure memory's, the shared-cause index's, the
// proposal index's, the store's) is taken while an agent's mu is held;
// the write gate (Loop.wmu) is taken only with no agent mu held.

// agentState is everything the loop knows about one agent. It is guarded
// by the agent's mutex while in memory, and saved in the format of
// docs/format.md (encodeState, decodeState); its JSON tags are those of
// format 1, which is still read.
type agentState struct {
	// AgentID is the agent's ID, exactly (the state file also carries it
	// in base64: JSON cannot carry non-UTF-8 strings).
	AgentID string `json:"agent_id"`

	Config     Config   `json:"config"`
	History    []Config `json:"history,omitempty"` // backups, newest last, at most maxHistory
	MaxVersion int      `json:"max_version"`

	Verifying *Change `json:"verifying,omitempty"`
	Verify    counts  `json:"verify"`
	// Control counts the calls that ran the previous config while the
	// change is verified by MethodCanary.
	Control counts `json:"control,omitzero"`
	// Streak counts the calls that ran the previous config since the
	// change's current run of consecutive failures began (MethodCanary).
	Streak  counts   `json:"streak,omitzero"`
	Changes []Change `json:"changes,omitempty"` // decided changes, newest last, at most maxChanges

	CooldownUntil int64 `json:"cooldown_until_ns,omitempty"` // Unix ns
	// CooldownCluster is the cluster the analysis that started the
	// cooldown addressed: failures of another cluster may end the cooldown
	// early, once (CooldownEarly says it was).
	CooldownCluster uint64 `json:"cooldown_cluster,omitempty,string"`
	CooldownEarly   bool   `json:"cooldown_early,omitempty"`
	Critical        bool   `json:"critical,omitempty"`
	// CircuitOpenUntil is when the agent's open circuit lets a probe
	// through (Unix ns; 0 when closed).
	CircuitOpenUntil int64 `json:"circuit_open_until_ns,omitempty"`
	// Gen counts the configs installed (applied, rolled back, set): calls
	// are credited to the generation they started under, so that calls in
	// flight across a change never count for the new config.
	Gen uint64 `json:"generation"`

	Manual   *thresholdJSON `json:"threshold,omitempty"`
	Rejected []Tweak        `json:"rejected,omitempty"` // at most maxRejected, oldest first

	Tracker tracker `json:"tracker"`

	// Clusters are the agent's failure clusters, at most maxClusters.
	Clusters []clusterRec `json:"clusters,omitempty"`
	// Proposals are the agent's proposals, at most maxProposals, oldest
	// first.
	Proposals []Proposal `json:"proposals,omitempty"`

	// analyzing is set while a strategy runs for the agent, early when
	// that run ended a cooldown early; they are not saved.
	analyzing, early bool
}

// outageCooldown divides the cooldown after a strategy run that proposed
// nothing during an upstream outage (see BuiltinStrategy.OutageAgents), so
// that the agent is looked at again soon after the outage ends.
const outageCooldown = 12

// Bounds on the per-agent lists, so that an agent's memory does not grow
// with its history.
const (
	maxHistory  = 16
	maxChanges  = 16
	maxRejected = 32
)

// thresholdJSON is a manual Threshold as stored.
type thresholdJSON struct {
	Failures int          `json:"failures"`
	Window   jsonDuration `json:"window"`
	Cooldown jsonDuration `json:"cooldown"`
}

func (t *thresholdJSON) threshold() Threshold {
	return Threshold{Failures: t.Failures, Window: time.Duration(t.Window), Cooldown: time.Duration(t.Cooldown)}
}

// newState is the state of an agent the loop has not seen, running cfg.
func newState(id string, cfg Config) agentState {
	return agentState{
		AgentID:    id,
		Config:     cfg,
		MaxVersion: cfg.Version,
		Tracker:    tracker{Win: window{Width: slotWidth(profiles[len(profiles)-1].threshold.Window)}},
	}
}

// ruleBook is what transitions need to know of the Loop: its policies.
type ruleBook struct {
	policy  RollbackPolicy         // with its defaults
	breaker CircuitBreaker         // off when Failures is 0
	newID   func(time.Time) string // unique IDs of changes, events, proposals
}

// effects are what a transition asks the Loop to carry out once the
// agent's lock is released, in this order: publish the config (done
// under the lock), queue the events (under the lock, to keep their
// order), save, then log and notify the events, record fix outcomes in
// the failure memory, index proposals, and start an analysis.
type effects struct {
	events    []*Event  // in decision order
	fixes     []fixNote // outcomes for the failure memory
	proposals []Proposal
	// decided is a change confirmed or rolled back (decision says
	// which); applied is a change applied.
	decided  *Change
	decision EventType
	applied  *Change
	// analysis is a strategy run to start, under threshold th.
	analysis *Analysis
	th       Threshold
	publish  bool // the config in force, or its canary arm, changed
	circuit  bool // the circuit opened or closed
	save     bool // the state must be saved before the caller returns
	rejected bool // a tweak was refused
}

// fixNote is a fix outcome for the failure memory's cluster.
type fixNote struct {
	cluster string
	fix     Fix
}

func (e *effects) event(ev *Event) { e.events = append(e.events, ev) }

// remember notes ch's outcome for the failure memory.
func (e *effects) remember(ch *Change, state FixOutcome, at time.Time) {
	if f, ok := fixNoteOf(ch, state, at); ok {
		e.fixes = append(e.fixes, f)
	}
}

// fixNoteOf is ch's outcome as the failure memory keeps it; ok is false
// when ch addresses no cluster.
func fixNoteOf(ch *Change, state FixOutcome, at time.Time) (_ fixNote, ok bool) {
	if ch.Cluster == "" {
		return fixNote{}, false
	}
	return fixNote{ch.Cluster, Fix{AgentID: ch.AgentID, ChangeID: ch.ID, ProposalID: ch.ProposalID,
		From: ch.From.clone(), To: ch.To.clone(), Reason: ch.Reason, State: state, Time: at}}, true
}

// call is one finished call, as the state machine books it.
type call struct {
	gen     uint64 // the config generation it started under
	version int    // the config version it ran
	arm     Arm
	probe   bool // it was a half-open circuit's probe
	end     time.Time
	dur     time.Duration
	failed  bool
	ignored bool // its caller's context ended first: counted only as ignored
	text    string
	class   failure.Class
	cluster uint64
}

// record books c and acts on it: it may confirm or roll back the change
// under verification, move the circuit, or ask for an analysis. sig is a
// failure's signature (in the caller's scratch buffer).
func (s *agentState) record(c *call, sig []byte, r *ruleBook, eff *effects) {
	if c.ignored {
		s.Tracker.Ignored++
		return
	}
	endN := c.end.UnixNano()
	tgen := c.gen
	if c.arm == ArmControl {
		// The previous config's calls never count toward the new
		// config's trigger.
		tgen--
	}
	s.Tracker.record(tgen, endN, c.dur, c.failed, c.version, c.text, uint32(c.cluster))
	if c.failed {
		s.observeCluster(c.cluster, sig, c.class, c.text, endN)
	}
	if (c.failed || c.probe) && r.breaker.Failures > 0 {
		s.moveCircuit(c.probe, c.failed, c.end, r, eff)
	}
	if s.Verifying != nil {
		if c.gen == s.Gen {
			if c.arm == ArmControl {
				s.Control.add(c.dur, c.failed)
				s.Streak.add(c.dur, c.failed)
			} else {
				if !c.failed || s.Verify.Consec == 0 {
					s.Streak = counts{} // a run of failures ends or begins
				}
				s.Verify.add(c.dur, c.failed)
			}
			switch v := r.policy.Decide(s.evidence()); v.Decision {
			case DecisionRollback:
				s.rollback(c.end, v.Reason, r, eff)
			case DecisionConfirm:
				s.confirm(c.end, v.Reason, r, eff)
			}
		}
	} else if c.failed && !s.analyzing && c.gen == s.Gen && s.Tracker.Total >= int64(r.policy.MinBeforeCalls) &&
		(endN >= s.CooldownUntil || !s.CooldownEarly && c.cluster != 0 && c.cluster != s.CooldownCluster) {
		th, prof := s.threshold(endN)
		start := endN - int64(th.Window)
		var due, early bool
		if endN >= s.CooldownUntil {
			due = s.Tracker.failuresOf(c.gen, start) >= th.Failures
		} else if !s.CooldownEarly && c.cluster != 0 && c.cluster != s.CooldownCluster {
			// A new kind of fault: its own threshold, once per cooldown.
			due = s.Tracker.clusterFailures(uint32(c.cluster), s.Config.Version, start) >= min(th.Failures, recentRing)
			early = due
		}
		if due && prof != ProfileManual && prof != ProfileCritical && !s.abnormal(endN) {
			due = false // a healthy agent's usual noise: nothing to fix
		}
		if due {
			s.analyzing, s.early = true, early
			eff.th = th
			eff.analysis = s.analysis(c.end, th, prof)
			if early {
				eff.analysis.only(failure.FormatClusterID(c.cluster))
			}
		}
	}
}

// Quiet healthy agents: under a frequency profile, once the older half of
// the analysis window holds baselineCalls calls (or else the whole window
// three times as many), the threshold's failures call for an analysis
// only if the recent calls fail abnormally often for the agent: at least
// as many failures among its last maxBeforeCalls calls as that baseline's
// failure rate gives in fewer than noiseOdds of cases.
const (
	baselineCalls = 30
	noiseOdds     = 0.01
)

// abnormal reports whether the agent's recent calls fail more often than
// the older half of its analysis window explains (see noiseOdds); true
// while that half is too short to tell.
func (s *agentState) abnormal(now int64) bool {
	calls, failures := s.Tracker.Win.older(now)
	if calls < baselineCalls {
		// Too short: the whole window, once it holds three times as many.
		if calls, failures, _ = s.Tracker.Win.sum(now); calls < 3*baselineCalls {
			return true
		}
	}
	recent := s.Tracker.regime(0, maxBeforeCalls)
	q := (float64(failures) + 0.5) / float64(calls+1)
	return binomTail(recent.Calls, recent.Failures, q) < noiseOdds
}

// threshold resolves the threshold at time now and keeps the window's
// bucket width in step with it.
func (s *agentState) threshold(now int64) (Threshold, Profile) {
	var manual *Threshold
	if s.Manual != nil {
		t := s.Manual.threshold()
		manual = &t
	}
	th, prof := thresholdFor(manual, s.Critical, s.Tracker.Day.sum(now))
	s.Tracker.Win.resize(slotWidth(th.Window))
	return th, prof
}

// stats returns the window's stats at time now.
func (s *agentState) stats(now int64) Stats {
	th, prof := s.threshold(now)
	st := s.Tracker.stats(now)
	st.Profile, st.Window = prof, th.Window
	return st
}

// health returns the health score at time now.
func (s *agentState) health(now int64) float64 {
	s.threshold(now)
	return s.Tracker.health(now)
}

// analysis is what the strategy is given when the threshold is crossed at
// now. The loop adds the shared causes and the memories.
func (s *agentState) analysis(now time.Time, th Threshold, prof Profile) *Analysis {
	n := now.UnixNano()
	st := s.Tracker.stats(n)
	st.Profile, st.Window = prof, th.Window
	fails := s.Tracker.recentFailures(n-int64(th.Window), func(lo uint32) (failure.Class, string) {
		if c := s.clusterOf(lo); c != nil {
			return c.Class, failure.FormatClusterID(c.ID)
		}
		return "", ""
	})
	return &Analysis{
		AgentID:   s.AgentID,
		Config:    s.Config.clone(),
		Stats:     st,
		Threshold: th,
		Failures:  fails,
		Clusters:  s.clustersLocked(n),
		Health:    s.Tracker.health(n),
		Rejected:  s.refused(now, ""),
		Time:      now.UTC(),
	}
}

// only keeps the failures and clusters of cluster id.
func (an *Analysis) only(id string) {
	an.Failures = slices.DeleteFunc(an.Failures, func(f Failure) bool { return f.Cluster != id })
	an.Clusters = slices.DeleteFunc(an.Clusters, func(c Cluster) bool { return c.ID != id })
}

// verifying returns the change under verification with its counts so far.
func (s *agentState) verifying() Change {
	ch := *s.Verifying
	ch.After = s.Verify.stats()
	if s.Control.Calls > 0 {
		c := s.Control.stats()
		ch.Control = &c
	}
	return ch
}

// evidence is what the policy judges the change under verification by.
func (s *agentState) evidence() Evidence {
	e := Evidence{Before: s.Verifying.Before, After: s.Verify.stats(), Control: s.Control.stats(), StreakControl: s.Streak.stats()}
	if w := s.Verifying.Window; w != nil {
		e.Window = *w
	}
	return e
}

// endVerify ends verification.
func (s *agentState) endVerify() {
	s.Verifying, s.Verify, s.Control, s.Streak = nil, counts{}, counts{}, counts{}
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
	ch.State, ch.Verdict, ch.DecidedAt = state, failure.Bound(reason, maxReason), now.UTC()
	s.endVerify()
	eff.remember(&ch, FixOutcome(state), ch.DecidedAt)
	s.Changes = appendBounded(s.Changes, ch, maxChanges)
	s.closeProposal(&ch, now)
	return &ch
}

// rollback restores the config before the change under verification and
// refuses the change from then on.
func (s *agentState) rollback(now time.Time, reason string, r *ruleBook, eff *effects) {
	ch := s.decide(now, ChangeRolledBack, reason, eff)
	s.install(ch.From.clone(), eff)
	if n := len(s.History); n > 0 && s.History[n-1].Version == ch.From.Version {
		s.History = s.History[:n-1]
	}
	rb := Tweak{Config: ch.To, Reason: failure.Bound(ch.Reason, maxReason), Cluster: ch.Cluster}
	if r.policy.RefuseFor > 0 {
		rb.Until = now.Add(r.policy.RefuseFor).UTC()
	}
	s.Rejected = appendBounded(s.Rejected, rb, maxRejected)
	eff.decided, eff.decision, eff.save = ch, EventRolledBack, true
	eff.event(newEvent(r.newID(now), now, EventRolledBack, ch))
}

// confirm ends verification, keeping the change; under MethodCanary,
// calls stop running the previous config.
func (s *agentState) confirm(now time.Time, reason string, r *ruleBook, eff *effects) {
	ch := s.decide(now, ChangeConfirmed, reason, eff)
	eff.decided, eff.decision, eff.save, eff.publish = ch, EventChangeConfirmed, true, true
	eff.event(newEvent(r.newID(now), now, EventChangeConfirmed, ch))
}

// moveCircuit moves the circuit after a counted call that ended at now:
// a probe closes it or opens it again; consecutive failures under the
// current config, with no change under verification, open it.
func (s *agentState) moveCircuit(probe, failed bool, now time.Time, r *ruleBook, eff *effects) {
	b := r.breaker
	open := func(why string) {
		d := b.coolOff(s.Tracker.Day.rate(now.UnixNano()))
		s.CircuitOpenUntil = now.Add(d).UnixNano()
		eff.event(&Event{ID: r.newID(now), Time: now.UTC(), Type: EventCircuitOpened, AgentID: s.AgentID,
			Message: fmt.Sprintf("agent %q: circuit opened for %v: %s", s.AgentID, d, why)})
	}
	switch {
	case probe && failed:
		open("the probe failed")
	case probe:
		s.CircuitOpenUntil = 0
		eff.event(&Event{ID: r.newID(now), Time: now.UTC(), Type: EventCircuitClosed, AgentID: s.AgentID,
			Message: fmt.Sprintf("agent %q: circuit closed: the probe succeeded", s.AgentID)})
	case failed && s.CircuitOpenUntil == 0 && b.trips(s.Tracker.consecutiveOf(s.Gen), s.Verifying != nil):
		open(fmt.Sprintf("%d consecutive failures under config v%d", b.Failures, s.Config.Version))
	default:
		return
	}
	eff.circuit, eff.save = true, true
}

// finishAnalysis takes the strategy's answer tw (or its error) to the
// analysis an, made at now: it starts the cooldown, and files tw as a
// proposal or applies it. The state is saved in any case, so that a
// restart does not run the strategy again at once.
func (s *agentState) finishAnalysis(now time.Time, an *Analysis, th Threshold, tw *Tweak, err error, r *ruleBook) (eff effects, _ error) {
	s.analyzing = false
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
	if top := largest(an.Clusters); id == "" && top != nil {
		id = top.ID
	}
	if v, perr := failure.ParseClusterID(id); perr == nil {
		s.CooldownCluster = v
	}
	eff.save = true
	switch {
	case err != nil || tw == nil:
		return eff, err
	case tw.Review:
		if p, isNew := s.file(an, tw, now, r); isNew {
			eff.proposals = append(eff.proposals, p.clone())
			eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, p))
		}
		return eff, nil
	}
	ch, err := s.apply(now, an, tw, r)
	if err != nil {
		eff.rejected = errors.Is(err, ErrTweakRejected)
		return eff, err
	}
	eff.applied, eff.publish = ch, true
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return eff, nil
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
	switch {
	case s.Config.Version != an.Config.Version || s.Verifying != nil:
		return nil, ErrStale
	case cfg.validate() != nil:
		return reject("%v", cfg.validate())
	case cfg.Equal(s.Config):
		return reject("it is the current config")
	}
	cluster := tw.Cluster
	if top := largest(an.Clusters); cluster == "" && top != nil {
		cluster = top.ID
	}
	for _, rb := range s.refused(now, cluster) {
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
		Reason:    failure.Bound(tw.Reason, maxReason),
		Before:    before,
		Window:    &win,
		Cluster:   tw.Cluster,
		AppliedAt: now.UTC(),
		State:     ChangeVerifying,
	}
	if ch.Cluster == "" {
		if top := largest(an.Clusters); top != nil {
			ch.Cluster = top.ID
		}
	}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	v := *ch
	s.endVerify()
	s.Verifying = &v
	var eff effects
	s.install(cfg, &eff)
	return ch, nil
}

// refused returns the rolled-back tweaks still refused at now for a tweak
// addressing cluster: those whose Until has not passed (zero: forever),
// for the same cluster, or either without one. An empty cluster means
// every cluster. A new slice, nil when there are none.
func (s *agentState) refused(now time.Time, cluster string) []Tweak {
	var out []Tweak
	for _, rb := range s.Rejected {
		if (rb.Until.IsZero() || now.Before(rb.Until)) && (cluster == "" || rb.Cluster == "" || rb.Cluster == cluster) {
			out = append(out, rb)
		}
	}
	return out
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

// setConfig installs cfg as the operator's baseline, superseding a change
// under verification.
func (s *agentState) setConfig(now time.Time, cfg Config, r *ruleBook) (eff effects) {
	if s.Verifying != nil {
		s.decide(now, ChangeSuperseded, "superseded by SetConfig", &eff)
	}
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
	p := Proposal{
		AgentID: s.AgentID, Rule: failure.Bound(tw.Rule, maxReason), Config: suggest, Rationale: failure.Bound(tw.Reason, maxReason),
		Confidence: min(max(tw.Confidence, 0), 1), Status: ProposalPending, Updated: now.UTC(),
	}
	if cl != nil {
		p.Class, p.RootCause, p.ClusterID, p.Signature = cl.Class, cl.RootCause, cl.ID, failure.Bound(cl.Signature, maxReason)
		p.Count, p.Examples = cl.Count, boundTexts(cl.Examples, maxExample, failure.MaxText)
	}
	same := func(q *Proposal) bool {
		return q.ClusterID == p.ClusterID && q.Rule == p.Rule &&
			(q.Config == nil) == (p.Config == nil) && (q.Config == nil || q.Config.Equal(*p.Config))
	}
	for i := range s.Proposals {
		q := &s.Proposals[i]
		if q.ClusterID != p.ClusterID {
			continue
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
	return &s.Proposals[len(s.Proposals)-1], true
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
	ch, err := s.apply(now, an, &Tweak{Config: *p.Config, Reason: "approved proposal: " + p.Rationale, Cluster: p.ClusterID}, r)
	if err != nil {
		return nil, eff, err
	}
	s.Verifying.ProposalID, ch.ProposalID = p.ID, p.ID
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
	p.Status, p.Note, p.Updated = ProposalRejected, failure.Bound(reason, maxReason), now.UTC()
	eff.save = true
	eff.event(proposalEvent(r.newID(now), now, EventProposalRejected, p))
	if p.Config != nil && p.ClusterID != "" {
		eff.fixes = append(eff.fixes, fixNote{p.ClusterID, Fix{AgentID: s.AgentID, ProposalID: p.ID, From: s.Config.clone(),
			To: p.Config.clone(), Reason: p.Rationale, State: FixRejected, Time: now.UTC()}})
	}
	return eff, nil
}

// snapshot copies the state for saving.
func (s *agentState) snapshot() agentState {
	snap := *s
	snap.History = slices.Clone(snap.History)
	snap.Changes = slices.Clone(snap.Changes)
	snap.Rejected = slices.Clone(snap.Rejected)
	snap.Clusters = slices.Clone(snap.Clusters)
	snap.Proposals = slices.Clone(snap.Proposals)
	if snap.Verifying != nil {
		v := *snap.Verifying
		snap.Verifying = &v
	}
	return snap
}

// largest returns the cluster with the most failures in the window.
func largest(cs []Cluster) *Cluster {
	var top *Cluster
	for i := range cs {
		if top == nil || cs[i].Count > top.Count {
			top = &cs[i]
		}
	}
	return top
}

// appendBounded appends v to s and drops the oldest elements beyond n.
func appendBounded[T any](s []T, v T, n int) []T {
	s = append(s, v)
	if len(s) > n {
		s = append(s[:0:0], s[len(s)-n:]...)
	}
	return s
}

// maxReason caps, in bytes, each free text the loop stores from a
// strategy, a policy or an operator: a Tweak's Reason as kept in a Change
// (Reason, Verdict), in the rejected tweaks and in a Fix of the failure
// memory, and a Proposal's Rationale, Rule, Signature and Note. A longer
// text is cut by Bound.
const maxReason = 512

// boundTexts returns the first n texts of ss, each cut by failure.Bound
// to each bytes: a new slice, nil when there are none.
func boundTexts(ss []string, n, each int) []string {
	var out []string
	for _, s := range ss[:min(len(ss), max(n, 0))] {
		out = append(out, failure.Bound(s, each))
	}
	return out
}
