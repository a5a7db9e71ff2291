package selfimprove

import (
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/verdict"
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
	// Streak counts the calls that ran the previous config during the
	// change's current run of consecutive failures (MethodCanary).
	Streak  streak   `json:"streak,omitzero"`
	Changes []Change `json:"changes,omitempty"` // decided changes, newest last, at most maxChanges

	CooldownUntil int64 `json:"cooldown_until_ns,omitempty"` // Unix ns
	// CooldownCluster is the cluster the analysis that started the
	// cooldown addressed: failures of another cluster may end the cooldown
	// early, once (CooldownEarly says it was).
	CooldownCluster uint64 `json:"cooldown_cluster,omitempty,string"`
	CooldownEarly   bool   `json:"cooldown_early,omitempty"`
	Critical        bool   `json:"critical,omitempty"`
	// ProposeOnly: the agent's tweaks are filed for approval
	// (Loop.SetProposeOnly).
	ProposeOnly bool `json:"propose_only,omitempty"`
	// analyzing is set while a strategy runs for the agent, early when
	// that run ended a cooldown early; they are not saved.
	analyzing, early bool
	// leftOpen is the largest cluster the last analysis saw and left
	// unanswered (see unanswered), by the low 16 bits of its ID (a
	// filter: unanswered checks the cluster itself); 0: none. Not
	// saved. 16 bits, so that an agent stays in its 3456-byte size class
	// (TestAgentSizeClass).
	leftOpen uint16
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

	// Route is the agent's way back to its primary, its dead routes and
	// its hold (state_routes.go); nil until it has any.
	Route *routeState `json:"-"`
	// Quality: scores and costs per config version; nil until any.
	Quality *qualityBook `json:"-"`
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
	probes  ProbePolicy            // with its defaults
	dead    *deadBook              // the Loop's dead routes; nil: none
	routes  *routeBook             // the agents' ladders; nil: none
	cands   *candidateBook         // the agents' candidates; nil: none
	explore Exploration            // with its defaults
	breaker CircuitBreaker         // off when Failures is 0
	newID   func(time.Time) string // unique IDs of changes, events, proposals
}

// effects are what a transition asks the Loop to carry out once the
// agent's lock is released, in this order: publish the config (done
// under the lock), queue the events (under the lock, to keep their
// order), save, then log and notify the events, record fix outcomes in
// the failure memory, index proposals, and start an analysis.
type effects struct {
	events []*Event  // in decision order
	fixes  []fixNote // outcomes for the failure memory
	// learned are outcomes of changes already decided, for a cluster
	// new to the agent's table (agentState.fixesFor): the memory takes
	// them whatever the input decides.
	learned   []fixNote
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
	probe    bool // the probe schedule of the primary changed
	// dead are routes to mark dead loop-wide; hold a hold that began or
	// ended.
	dead []deadNote
	hold *holdNote
	// Found by the driver under the agent's lock (see driver.go): moved,
	// that a call's failure opened the circuit until until (Unix ns), or
	// its probe closed it; judge, that a call's counts are for the fleet
	// to judge; window, the analysis window's width (ns); refused, why a
	// strategy's tweak was not applied.
	moved   bool
	judge   bool
	until   int64
	window  int64
	refused error
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
	probe   bool   // it was a half-open circuit's probe
	route   string // the route it ran (Config.Route)
	// homeProbe: its first attempt probed the primary; probeClass is
	// that attempt's failure class ("" when it succeeded) and probeText
	// its text.
	homeProbe  bool
	probeClass failure.Class
	probeText  string
	// fellBack: its last attempt ran on fellRoute after a failure of
	// fellClass, with fellText, on its own route fellFrom.
	fellBack  bool
	fellClass failure.Class
	fellRoute string
	fellFrom  string
	fellText  string
	// fellCluster is the cluster of the failure on fellFrom (0: none,
	// as when the route was known dead before the call).
	fellCluster uint64
	// fitted: it ran on route, not its agent's, which its request did not
	// fit (see WithNeeds): no evidence about the agent's route.
	fitted bool
	// fellSilent: its own route left an attempt without an answer;
	// skipped: it was known dead, and the call never asked it.
	fellSilent, skipped bool
	// earlier: a call Record books under an earlier version than the
	// one in force, whose route is that version's (route "": found when
	// it is booked).
	earlier  bool
	end      time.Time
	dur      time.Duration
	attempts int // the attempts it made
	failed   bool
	ignored  bool // its caller's context ended first: counted only as ignored
	text     string
	class    failure.Class
	cluster  uint64
	// from is the agent of the call nested in this one whose failure
	// this one passed on; suspect, that the failure looked passed on
	// from another call, unproven (see Loop.cause).
	from    string
	suspect bool
	// q is the score and cost the call reported of itself.
	q quality
}

// nested reports whether c's failure was, or looked, passed on from a
// call nested in it: the agent it came from owns it.
func (c *call) nested() bool { return c.from != "" || c.suspect }

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
	if c.q.any() {
		s.bookCall(c, r)
	}
	if c.failed {
		cl, fresh := s.observeCluster(c.cluster, sig, c.class, c.text, endN)
		if !c.suspect {
			cl.From = boundFrom(c.from)
		}
		if fresh {
			s.fixesFor(c.cluster, eff)
		}
	}
	if c.probe && s.Route != nil && s.Route.Hold != "" {
		s.holdProbed(c, r, eff)
	} else if (c.failed || c.probe) && r.breaker.Failures > 0 {
		s.moveCircuit(c.probe, c.failed, c.end, r, eff)
	}
	if c.failed || c.homeProbe || c.fellBack || s.Route != nil && (s.Route.Run != 0 || s.Route.Strikes != 0) {
		s.routeCall(c, r, eff)
	}
	if s.Verifying != nil {
		if c.gen == s.Gen {
			if c.arm == ArmControl {
				s.Control.add(c.dur, c.failed)
				s.Streak.add(c.failed)
			} else {
				if !c.failed || s.Verify.Consec == 0 {
					s.Streak = streak{} // a run of failures ends or begins
				} else {
					s.Streak.extend()
				}
				s.Verify.add(c.dur, c.failed)
				if v := s.Verifying; !c.failed && servedAlike(v.From, v.To, c.attempts, c.dur) {
					s.Verify.alike(c.dur)
				}
			}
			s.judge(c.end, r, eff)
		}
	} else if c.failed && !c.nested() && !s.analyzing && c.gen == s.Gen && (s.Tracker.Total >= int64(r.policy.MinBeforeCalls) || s.operatorThreshold()) &&
		(endN >= s.CooldownUntil || !s.CooldownEarly && c.cluster != 0 && c.cluster != s.CooldownCluster) {
		s.trigger(c, endN, eff)
	}
	if c.q.scored && c.gen == s.Gen && c.arm != ArmControl {
		s.watchScore(c.version, c.q.score, c.end, r, eff)
	}
	if c.q.any() && c.gen == s.Gen && c.arm != ArmControl {
		s.exploreDue(c.end, r, eff)
	}
}

// trigger asks for an analysis when the failed call c, ended at endN,
// calls for one: the threshold's failures once the cooldown is over; or,
// once per cooldown, a new kind of fault (a cluster other than the one
// the cooldown is for) with its own threshold's count, or the largest
// cluster the last analysis saw and left unanswered once it passes the
// strategy's secondary bar (see unanswered). A new kind needs the whole count: at
// its first failures, the calls before it are no reference to judge its
// fix by. The quiet check of a healthy agent spares an unanswered
// cluster: its failures may be usual, but no one looked at them yet. An
// analysis for a cluster alone holds that cluster only.
func (s *agentState) trigger(c *call, endN int64, eff *effects) {
	th, prof := s.threshold(endN)
	start := endN - int64(th.Window)
	var due, early, alone bool
	if endN >= s.CooldownUntil {
		due = s.Tracker.failuresOf(c.gen, start) >= th.Failures
	} else if !s.CooldownEarly && c.cluster != 0 && c.cluster != s.CooldownCluster {
		due = s.Tracker.clusterFailures(uint32(c.cluster), s.Config.Version, start) >= min(th.Failures, recentRing) ||
			s.leftOpen != 0 && uint16(c.cluster) == s.leftOpen && s.unanswered(c.cluster, start)
		early, alone = due, due
	}
	if due && prof != ProfileManual && prof != ProfileCritical && !s.abnormal(endN) {
		// A healthy agent's usual noise: nothing to fix, unless no one
		// looked at it yet.
		due = s.unanswered(c.cluster, start)
		alone = true
	}
	if due {
		s.analyzing, s.early = true, early
		eff.th = th
		eff.analysis = s.analysis(c.end, th, prof)
		if alone {
			eff.analysis.only(failure.FormatClusterID(c.cluster))
			eff.analysis.Trigger = failure.FormatClusterID(c.cluster)
		} else if lo := s.Tracker.mostOf(uint32(c.cluster), c.version, start); lo != 0 {
			if k := s.clusterOf(lo); k != nil {
				eff.analysis.Trigger = failure.FormatClusterID(k.ID)
			}
		}
	}
}

// unanswered reports whether cluster cl has no answer yet and passes the
// built-in strategy's secondary bar among the failures kept since start
// under the current config: at least minSecondary of them, and a fifth.
// Only an agent analysed before has unanswered clusters: one never
// analysed keeps the quiet check of healthy agents. A cluster is answered
// by the analysis the cooldown is for, a proposal, a change (decided or
// under verification), or a tweak rolled back for it.
func (s *agentState) unanswered(cl uint64, start int64) bool {
	if cl == 0 || s.CooldownCluster == 0 || cl == s.CooldownCluster {
		return false // no analysis yet, or the one the cooldown is for
	}
	if n, all := s.Tracker.clusterShare(uint32(cl), s.Config.Version, start); n < minSecondary || 5*n < all {
		return false
	}
	id := failure.FormatClusterID(cl)
	return !slices.ContainsFunc(s.Proposals, func(p Proposal) bool { return p.ClusterID == id }) &&
		!slices.ContainsFunc(s.Changes, func(ch Change) bool { return ch.Cluster == id }) &&
		(s.Verifying == nil || s.Verifying.Cluster != id) &&
		!slices.ContainsFunc(s.Rejected, func(t Tweak) bool { return t.Cluster == id })
}

// operatorThreshold reports whether an operator chose the agent's
// threshold (SetThreshold or MarkCritical): then it is obeyed from the
// first call, without the cold-start minimum of automatically profiled
// agents (RollbackPolicy.MinBeforeCalls).
func (s *agentState) operatorThreshold() bool { return s.Manual != nil || s.Critical }

// abnormal reports whether the agent's recent calls fail more often than
// its baseline (see tracker.baseline) explains (see noiseOdds); true
// while the baseline is too short to tell.
func (s *agentState) abnormal(now int64) bool {
	calls, failures, whole := s.Tracker.baseline(now)
	if whole && calls < 3*baselineCalls {
		// Too short to tell.
		return true
	}
	if 2*failures >= calls {
		// A baseline where half the calls fail is no health to keep
		// quiet about, least of all one where every call fails.
		return true
	}
	recent := s.Tracker.regime(0, maxBeforeCalls)
	q := (float64(failures) + 0.5) / float64(calls+1)
	return verdict.BinomTail(recent.Calls, recent.Failures, q) < noiseOdds
}

// threshold resolves the threshold at time now and keeps the window's
// bucket width in step with it: a transition's (a getter's is
// thresholdAt).
func (s *agentState) threshold(now int64) (Threshold, Profile) {
	th, prof := s.thresholdFor(s.Tracker.Day.sum(now))
	s.Tracker.Win.resize(slotWidth(th.Window))
	return th, prof
}

// thresholdFor resolves the threshold for perDay calls a day.
func (s *agentState) thresholdFor(perDay int) (Threshold, Profile) {
	var manual *Threshold
	if s.Manual != nil {
		t := s.Manual.threshold()
		manual = &t
	}
	return thresholdFor(manual, s.Critical, perDay)
}

// stats returns the window's stats at time now: a transition's, which
// moves the window on to now at the threshold's width (a getter's is
// statsAt).
func (s *agentState) stats(now int64) Stats {
	th, prof := s.threshold(now)
	return s.statsOf(&s.Tracker, now, th, prof)
}

// statsOf returns the stats at time now of t, s's tracker or a copy.
func (s *agentState) statsOf(t *tracker, now int64, th Threshold, prof Profile) Stats {
	st := t.stats(now)
	st.Profile, st.Window = prof, th.Window
	s.qualityOf(s.Config.Version).fill(&st)
	return st
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
	an := &Analysis{
		AgentID:   s.AgentID,
		Config:    s.Config.clone(),
		Stats:     st,
		Threshold: th,
		Failures:  fails,
		Clusters:  s.clustersLocked(n, s.Tracker.Win.Width),
		Health:    s.Tracker.health(n),
		Rejected:  s.refused(now, ""),
		Time:      now.UTC(),
	}
	for _, d := range s.deadList() {
		if d.Until > n {
			an.DeadRoutes = append(an.DeadRoutes, DeadRoute{Route: d.Route, Until: time.Unix(0, d.Until).UTC(), Reason: d.Why})
		}
	}
	return an
}

// only keeps the failures and clusters of cluster id.
func (an *Analysis) only(id string) {
	an.Failures = slices.DeleteFunc(an.Failures, func(f Failure) bool { return f.Cluster != id })
	an.Clusters = slices.DeleteFunc(an.Clusters, func(c Cluster) bool { return c.ID != id })
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
		open(fmt.Sprintf("the last %d calls under v%d failed in a row, and no change is being tried; %d consecutive failures under config v%d",
			b.Failures, s.Config.Version, b.Failures, s.Config.Version))
	default:
		return
	}
	eff.circuit, eff.save = true, true
}

// snapshot copies the state for saving.
func (s *agentState) snapshot() agentState {
	snap := *s
	snap.History = slices.Clone(snap.History)
	snap.Changes = slices.Clone(snap.Changes)
	snap.Rejected = slices.Clone(snap.Rejected)
	snap.Clusters = slices.Clone(snap.Clusters)
	snap.Proposals = slices.Clone(snap.Proposals)
	if snap.Route != nil {
		r := *snap.Route
		r.Dead = slices.Clone(r.Dead)
		snap.Route = &r
	}
	snap.Quality = snap.Quality.clone()
	if snap.Verifying != nil {
		v := *snap.Verifying
		snap.Verifying = &v
	}
	if snap.Tracker.Outages != nil {
		o := *snap.Tracker.Outages // the live state goes on writing its own
		snap.Tracker.Outages = &o
	}
	return snap
}

// largest returns the cluster with the most failures in the window,
// among the agent's own (not passed on from a nested call: see
// Cluster.From).
func largest(cs []Cluster) *Cluster {
	var top *Cluster
	for i := range cs {
		if cs[i].From == "" && (top == nil || cs[i].Count > top.Count) {
			top = &cs[i]
		}
	}
	return top
}

// target returns the cluster the analysis is for: the Trigger's, or the
// largest of the agent's own without one (nil with neither).
func (an *Analysis) target() *Cluster {
	if an.Trigger != "" {
		for i := range an.Clusters {
			if an.Clusters[i].ID == an.Trigger {
				return &an.Clusters[i]
			}
		}
	}
	return largest(an.Clusters)
}

// targetID is the ID of target, "" with none.
func (an *Analysis) targetID() string {
	if c := an.target(); c != nil {
		return c.ID
	}
	return an.Trigger
}

// proposeOnly reports whether tweaks for the agent whose state is s are
// filed for approval rather than applied: loop-wide or for the agent.
func (r *ruleBook) proposeOnly(s *agentState) bool {
	return r.policy.ProposeOnly || s.ProposeOnly
}

// explores reports whether ch explores a candidate.
func (s *agentState) explores(ch *Change) bool {
	return s.Quality != nil && s.Quality.Explore.Version != 0 && s.Quality.Explore.Version == ch.To.Version
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

// watchScore feeds a score of version, which ended at now, to the
// watch, and starts an analysis when the watch fires (see RollbackPolicy.
// QualityDrop). The score is already booked.
func (s *agentState) watchScore(version int, score float64, now time.Time, r *ruleBook, eff *effects) {
	s.watchScores(version, 1, score, score*score, now, true, r, eff)
}
