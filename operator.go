package selfimprove

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The Loop's methods for operators and tools. Getters never create an
// agent, never keep one loaded, and never write: an agent not in memory
// is read from the store (before Close), with the fleet's shared state
// of it under WithFleet (docs/fleet.md), and an unknown one gets the
// documented answer for "no such agent". Setters load or create the
// agent, and save what they did before they return; but Rewind and
// ClearRejected, which act on what an agent has, create none.

// Config returns a copy of agentID's current config (the default config
// for an agent the loop does not know, or whose state cannot be read).
func (l *Loop) Config(agentID string) Config {
	if v, ok := l.agents.Load(agentID); ok {
		return v.(*agent).cfg.Load().Config.clone()
	}
	c := l.defaultConfig.clone()
	l.view(agentID, func(s *agentState) { c = s.Config.clone() })
	return c
}

// Stats returns agentID's stats over its analysis window (for an agent the
// loop does not know, those of a new agent: no calls, SuccessRate 1).
func (l *Loop) Stats(agentID string) Stats {
	now := l.clock.Now().UnixNano()
	var st Stats
	if !l.viewStats(agentID, func(s *agentState) { st = s.statsAt(now) }) {
		fresh := newState(agentID, l.defaultConfig)
		st = fresh.statsAt(now)
	}
	return st
}

// Threshold returns the threshold in force for agentID and the profile it
// comes from (the low-frequency profile for an agent the loop does not
// know).
func (l *Loop) Threshold(agentID string) (Threshold, Profile) {
	now := l.clock.Now().UnixNano()
	th, prof := thresholdFor(nil, false, 0)
	l.viewStats(agentID, func(s *agentState) { th, prof = s.thresholdAt(now) })
	return th, prof
}

// Health returns agentID's health score in [0, 1]: the success rate of
// the calls in its analysis window, each weighted by its recency with a
// half-life of a quarter of the window (HealthHalfLife), to within a
// sixty-fourth of the window. It is 1 with no calls in the window, and for
// an agent the loop does not know.
func (l *Loop) Health(agentID string) float64 {
	now := l.clock.Now().UnixNano()
	h := 1.0
	l.viewStats(agentID, func(s *agentState) { h = s.healthAt(now) })
	return h
}

// Clusters returns agentID's failure clusters with failures in its
// analysis window, most failures first.
func (l *Loop) Clusters(agentID string) []Cluster {
	now := l.clock.Now().UnixNano()
	var out []Cluster
	l.viewStats(agentID, func(s *agentState) { out = s.clustersLocked(now, s.readWidth(now)) })
	return out
}

// Changes returns agentID's recent changes, oldest first: up to 16 decided
// ones, then the one under verification, if any.
func (l *Loop) Changes(agentID string) []Change {
	var out []Change
	l.view(agentID, func(s *agentState) {
		out = slices.Clone(s.Changes)
		if s.Verifying != nil {
			out = append(out, s.verifying())
		}
	})
	return out
}

// History returns the configs agentID ran that the loop still holds,
// oldest version first, the current one last: the backups kept for
// rollback (up to 16) and the configs of the kept changes. Rewind takes
// any of their versions. It is nil for an agent the loop does not know.
func (l *Loop) History(agentID string) []Config {
	var out []Config
	l.view(agentID, func(s *agentState) {
		seen := map[int]bool{}
		add := func(c Config) {
			if c.Version > 0 && !seen[c.Version] {
				seen[c.Version] = true
				out = append(out, c.clone())
			}
		}
		for _, c := range s.History {
			add(c)
		}
		for _, ch := range s.Changes {
			add(ch.From)
			add(ch.To)
		}
		if s.Verifying != nil {
			add(s.Verifying.From)
		}
		slices.SortFunc(out, func(x, y Config) int { return x.Version - y.Version })
		out = slices.DeleteFunc(out, func(c Config) bool { return c.Version == s.Config.Version })
		out = append(out, s.Config.clone())
	})
	return out
}

// SetConfig sets agentID's baseline config, as an operator action. The
// config gets the agent's next version; a change under verification is
// superseded. The new config and an EventConfigSet are saved before
// SetConfig returns; a config that cannot be saved is not set (the error
// says so; a change it superseded stays superseded). After Close it
// returns ErrClosed and writes nothing.
//
// cfg.Version must be 0, or the agent's current version (a config read
// with Config and edited); another version is refused, as is a field
// outside its bound (see Config), with an error wrapping
// ErrInvalidConfig that names the field.
func (l *Loop) SetConfig(agentID string, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	var route *routeState
	return l.operateUndo(agentID, func(a *agent) (effects, error) {
		if err := checkVersion(cfg.Version, a.s.Config.Version); err != nil {
			return effects{}, err
		}
		route = a.s.routeCopy()
		return a.s.setConfig(l.clock.Now(), cfg, &l.rules), nil
	}, func(a *agent, ch *Change) effects { return a.unsetConfig(ch, route) })
}

// Rewind installs the config agentID ran as version as its next version,
// as an operator action with the given reason. The change is verified
// like any other, and may be rolled back; a change under verification is
// superseded. The versions it takes are those History returns; it fails
// with ErrUnknownVersion for another, and with ErrTweakRejected for the
// current one. For an agent the loop does not know (no call, no saved
// state, none in the fleet) it fails with ErrUnknownVersion, saying the
// agent has no history, and creates nothing. The change is saved before
// Rewind returns. After Close it returns ErrClosed and writes nothing.
func (l *Loop) Rewind(agentID string, version int, reason string) (Change, error) {
	if l.unknown(agentID) {
		return Change{}, fmt.Errorf("%w: agent %q has no history: it made no call and has no saved state", ErrUnknownVersion, agentID)
	}
	var ch *Change
	var route *routeState
	err := l.operateUndo(agentID, func(a *agent) (effects, error) {
		route = a.s.routeCopy()
		c, eff, err := a.s.rewind(l.clock.Now(), version, reason, &l.rules)
		ch = c
		return eff, err
	}, func(a *agent, ch *Change) effects { return a.unapplyOperator(ch, route) })
	if err != nil {
		return Change{}, err
	}
	l.m.improvements.Add(1)
	if f, ok := fixNoteOf(ch, FixVerifying, ch.AppliedAt); ok {
		l.mem.addFix(f.cluster, f.fix)
	}
	return *ch, nil
}

// Try applies cfg to agentID as a change verified like any other: the
// config becomes the agent's next version at once, is judged on success,
// latency, quality and cost against the config before it
// (RollbackPolicy), and is rolled back if it is worse, or confirmed; its
// Change is returned, and its verdict comes as any change's (Changes,
// the events). It is the way to try a config safely, say a cheaper
// model: SetConfig installs a config unverified, Rewind only a version
// the agent ran. A config rolled back before may be tried again (an
// operator chose it); one on a route that is dead is refused.
//
// cfg.Version must be 0, or the agent's current version (a config read
// with Config and edited). It fails with ErrInvalidConfig naming the
// field for a config outside its bounds, with ErrVerifying while
// another change is verified (try again once it is decided), and with
// ErrTweakRejected for the current config or a dead route. Under
// propose-only (SetProposeOnly, RollbackPolicy.ProposeOnly) nothing is
// applied without an approval: the config is filed as a pending
// Proposal, and Try returns ErrFiledForApproval with a Change that holds
// only the proposal's ID (ProposalID); Approve applies it, verified. The
// change (or the proposal) is saved before Try returns. After Close it
// returns ErrClosed and writes nothing.
func (l *Loop) Try(agentID string, cfg Config, reason string) (Change, error) {
	if err := cfg.validate(); err != nil {
		return Change{}, err
	}
	var ch *Change
	var filed *Proposal
	var route *routeState
	err := l.operateUndo(agentID, func(a *agent) (effects, error) {
		if err := checkVersion(cfg.Version, a.s.Config.Version); err != nil {
			return effects{}, err
		}
		route = a.s.routeCopy()
		c, p, eff, err := a.s.try(l.clock.Now(), cfg, reason, &l.rules)
		ch, filed = c, p
		return eff, err
	}, func(a *agent, ch *Change) effects { return a.unapplyOperator(ch, route) })
	switch {
	case err != nil:
		return Change{}, err
	case filed != nil:
		return Change{AgentID: agentID, ProposalID: filed.ID}, fmt.Errorf("%w: agent %q is propose-only: the config is proposal %s (Approve applies it)", ErrFiledForApproval, agentID, filed.ID)
	}
	l.m.improvements.Add(1)
	return *ch, nil
}

// SetThreshold overrides agentID's profile with t; the zero Threshold
// removes the override. The setting is saved before SetThreshold returns.
func (l *Loop) SetThreshold(agentID string, t Threshold) error {
	if t != (Threshold{}) {
		if err := t.validate(); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("agent %q: threshold set to %d failures in %v, cooldown %v, by operator", agentID, t.Failures, t.Window, t.Cooldown)
	if t == (Threshold{}) {
		msg = fmt.Sprintf("agent %q: manual threshold removed by operator", agentID)
	}
	return l.update(agentID, EventThresholdSet, msg, func(s *agentState) {
		if t == (Threshold{}) {
			s.Manual = nil
		} else {
			s.Manual = &thresholdJSON{Failures: t.Failures, Window: jsonDuration(t.Window), Cooldown: jsonDuration(t.Cooldown)}
		}
	})
}

// MarkCritical marks agentID critical (or not). A critical agent gets the
// critical threshold unless SetThreshold overrides it. The mark is saved
// before MarkCritical returns.
func (l *Loop) MarkCritical(agentID string, critical bool) error {
	return l.update(agentID, EventCriticalSet, fmt.Sprintf("agent %q: marked critical=%v by operator", agentID, critical),
		func(s *agentState) { s.Critical = critical })
}

// ClearRejected forgets the tweaks rolled back for agentID, so that the
// strategy's proposals are no longer refused for matching them. For an
// agent the loop does not know it has nothing to forget: it returns nil
// and creates nothing.
func (l *Loop) ClearRejected(agentID string) error {
	if l.unknown(agentID) {
		return nil
	}
	return l.update(agentID, EventRejectedCleared, fmt.Sprintf("agent %q: rejected tweaks cleared by operator", agentID),
		func(s *agentState) { s.Rejected = nil })
}

// update applies an operator setting to agentID's state, and saves it with
// an event of type t.
func (l *Loop) update(agentID string, t EventType, msg string, f func(*agentState)) error {
	return l.operate(agentID, func(a *agent) (effects, error) {
		return a.s.operatorSet(l.clock.Now(), t, msg, f, &l.rules), nil
	})
}

// SetCandidates gives agentID candidate configs of its own, in place of
// those WithCandidates sets, in the order the loop tries them; nil or
// empty removes the agent's own. The built-in strategy tries them one at
// a time, once a fall of success leaves it no safe move of its own, or
// first when the mean score falls; with WithExploration, the loop also
// explores them while the agent is healthy (docs/quality.md#candidates).
// Every move to a candidate is a change, verified on success, latency,
// quality and cost; one rolled back is refused for RollbackPolicy.
// RefuseFor (default 24 hours). The candidates live in the Loop, not in
// its store: set them again after a restart, as options are. It fails
// with ErrInvalidAgentID, or ErrInvalidOption naming the field (see
// WithCandidates).
func (l *Loop) SetCandidates(agentID string, cs []Candidate) error {
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if err := checkCandidates(cs); err != nil {
		return optionErr("SetCandidates", err)
	}
	b := &l.cands
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string][]Candidate{}
	if old := b.per.Load(); old != nil {
		maps.Copy(m, *old)
	}
	if len(cs) == 0 {
		delete(m, agentID)
	} else {
		m[agentID] = cloneCandidates(cs)
	}
	b.per.Store(&m)
	return nil
}

// Candidates returns agentID's candidates: its own (see SetCandidates),
// or the Loop's (see WithCandidates). A copy; nil when none.
func (l *Loop) Candidates(agentID string) []Candidate {
	return cloneCandidates(l.cands.of(agentID))
}

// SetRoutes gives agentID a route ladder of its own, in place of the one
// WithRoutes sets; Routes{Off: true} keeps the agent off every ladder;
// the zero Routes removes the agent's own ladder (or Off). It takes
// effect at the agent's next call or analysis. The ladder lives in the
// Loop: set it again after a restart, as options are. The agent's state
// file records the ladder in force when it was saved, for readers (see
// Routes). It fails with ErrInvalidAgentID, or with ErrInvalidOption for
// a ladder outside the bounds of Routes.
func (l *Loop) SetRoutes(agentID string, r Routes) error {
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if err := r.validate(); err != nil {
		return optionErr("SetRoutes", err)
	}
	if r.Primary == "" && len(r.Fallbacks) == 0 && r.Models == nil && r.Limits == nil && !r.Off {
		l.routes.set(agentID, nil)
	} else {
		rc := r.clone()
		if len(rc.Limits) > 0 {
			l.limited.Store(true)
		}
		l.routes.set(agentID, &rc)
	}
	return nil
}

// Routes returns agentID's route ladder: its own (see SetRoutes), or the
// Loop's (see WithRoutes); Routes{Off: true} for an agent kept off them.
// A copy. A Loop on a ReadOnlyStore with neither returns the ladder the
// agent's state file records (the one in force when the Loop that ran it
// last saved it), so that a reader names the primary; the zero Routes
// when the file records none or cannot be read.
func (l *Loop) Routes(agentID string) Routes {
	if r := l.routes.own(agentID); r != nil {
		return r.clone()
	}
	if r := l.routes.of(agentID); r != nil {
		return r.clone()
	}
	if _, ro := l.store.(*ReadOnlyStore); ro && checkAgentID(agentID) == nil {
		return l.storedLadder(agentID)
	}
	return Routes{}
}

// storedLadder returns the ladder agent id's state file records (see
// Loop.Routes); the zero Routes when it records none or cannot be read
// (the read is bounded as every state file's, and logged when it fails).
func (l *Loop) storedLadder(id string) Routes {
	var r Routes
	err := guard("LoadAgent", func() error {
		return l.store.LoadAgent(id, func(data []byte) error {
			var d struct {
				Ladder *ladderDoc `json:"ladder"`
			}
			if err := json.Unmarshal(data, &d); err != nil || d.Ladder == nil {
				return err
			}
			var err error
			r, err = d.Ladder.routes()
			return err
		})
	})
	if err != nil && !failure.Is(err, fs.ErrNotExist) {
		l.log.Warn("selfimprove: route ladder of agent not read", "agent", id, "error", err)
	}
	return r
}

// AllClusters merges the clusters of the agents in memory (see
// WithMaxAgents) by ID: counts are summed, the first and last times span
// them all, the examples are those of the most recent, and Agents lists
// the agents. Most failures first.
func (l *Loop) AllClusters() []Cluster {
	now := l.clock.Now().UnixNano()
	byID := map[string]*clusterView{}
	l.eachAgent(func(a *agent) {
		for _, c := range a.s.clusterViewsLocked(now, a.s.readWidth(now)) {
			m := byID[c.ID]
			if m == nil {
				c.Agents, c.From = []string{a.id}, ""
				byID[c.ID] = &c
				continue
			}
			m.Agents = append(m.Agents, a.id)
			m.Count += c.Count
			m.Total += c.Total
			m.older += c.older
			m.newer += c.newer
			m.window = max(m.window, c.window)
			if c.FirstSeen.Before(m.FirstSeen) {
				m.FirstSeen = c.FirstSeen
			}
			if c.LastSeen.After(m.LastSeen) {
				m.LastSeen, m.Class, m.RootCause, m.Examples = c.LastSeen, c.Class, c.RootCause, c.Examples
			}
		}
	})
	out := make([]Cluster, 0, len(byID))
	for _, c := range byID {
		slices.Sort(c.Agents)
		c.Recurring = c.Count >= 3
		c.Trend = trendOf(c.FirstSeen.UnixNano(), now, c.window, c.older, c.newer)
		out = append(out, c.Cluster)
	}
	sortClusters(out)
	return out
}

// SharedCauses returns the signatures and classes that hit two or more
// agents, each within its own analysis window: likely common causes,
// such as an upstream outage. Signatures come first, then classes (other
// and canceled are not reported as shared classes); within each, the most
// agents first. The index behind it is kept in memory and bounded (1,024
// signatures, 8 agents each, the least recently hit dropped first); it
// covers the failures of this process and the clusters of the agents it
// has loaded.
func (l *Loop) SharedCauses() []SharedCause {
	return l.shared.causes(l.clock.Now().UnixNano(), "", false)
}

// Proposals returns the proposals that keep reports true for (all of
// them when keep is nil), oldest first. It covers every agent with
// proposals: those in memory, and, with a Store that implements
// metaStore (FileStore and RAMStore do), those not loaded, read from the
// store (and the fleet's state under WithFleet) as View reads them: like
// every getter it loads no agent, so that it never evicts one
// (WithMaxAgents).
func (l *Loop) Proposals(keep func(Proposal) bool) []Proposal {
	ids := l.proposalAgents()
	var out []Proposal
	add := func(s *agentState) {
		for _, p := range s.Proposals {
			if keep == nil || keep(p) {
				out = append(out, p.clone())
			}
		}
	}
	read := map[string]bool{}
	l.eachAgent(func(a *agent) {
		read[a.id] = true
		add(&a.s)
	})
	for _, id := range ids {
		if !read[id] {
			l.viewOf(id, false, add)
		}
	}
	slices.SortFunc(out, func(x, y Proposal) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

// Approve approves the pending proposal id. A proposal with a config goes
// through the same guard as an automatic tweak: it is applied as the
// agent's next config version and verified, and rolled back if it
// regresses; the proposal then records the outcome. It fails with
// ErrVerifying while another change is verified, and with
// ErrTweakRejected when the config was rolled back before (see
// ClearRejected; but for a config Try filed: an operator chose it) or is
// invalid or already current. A proposal with only
// a rule is marked approved. The outcome is saved before Approve returns;
// an approval that cannot be saved is taken back. After Close it returns
// ErrClosed.
func (l *Loop) Approve(id string) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	a, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	in := input{kind: inFunc, lock: lockHeld, more: &inputMore{tweak: true,
		op: func(a *agent) (effects, error) {
			_, eff, err := a.s.approve(l.clock.Now(), id, &l.rules)
			return eff, err
		},
		undo: func(a *agent, ch *Change) effects {
			a.dropQueued(func(ev *Event) bool {
				return ev.Change != nil && ev.Change.ID == ch.ID || ev.Proposal != nil && ev.Proposal.ID == id
			})
			a.s.unapprove(id, ch)
			return effects{publish: true}
		}}}
	var rep Report
	if err := l.stepLocked(context.Background(), a, &in, &rep, waits{}); err != nil {
		if errors.Is(err, ErrTweakRejected) {
			l.m.rejectedTweaks.Add(1)
		}
		return err
	}
	if rep.LoopErr != nil {
		return fmt.Errorf("selfimprove: proposal not applied: %w", rep.LoopErr)
	}
	return nil
}

// Reject closes the proposal id, pending or approved with only a rule,
// with the reason. The strategy's same suggestion for the same cluster is
// not filed again. The outcome is saved before Reject returns. After
// Close it returns ErrClosed.
func (l *Loop) Reject(id, reason string) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	a, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	in := input{kind: inFunc, lock: lockHeld, more: &inputMore{op: func(a *agent) (effects, error) {
		return a.s.reject(l.clock.Now(), id, reason, &l.rules)
	}}}
	var rep Report
	if err := l.stepLocked(context.Background(), a, &in, &rep, waits{}); err != nil {
		return err
	}
	return rep.LoopErr
}

// lockProposal finds proposal id and returns its agent, locked.
func (l *Loop) lockProposal(id string) (*agent, error) {
	for range 2 {
		agentID, ok := l.props.agentOf(id)
		if !ok {
			l.loadProposalAgents()
			if agentID, ok = l.props.agentOf(id); !ok {
				break
			}
		}
		a, err := l.lockAgent(nil, agentID, 0)
		if a == nil {
			return nil, err
		}
		if a.s.proposal(id) != nil {
			return a, nil
		}
		a.mu.Unlock()
		l.props.forget(id)
	}
	return nil, fmt.Errorf("%w: %s", ErrProposalNotFound, id)
}

// SetProposeOnly puts agentID in propose-only mode (on) or takes it out:
// every tweak a strategy proposes for it is filed as a Proposal, with its
// analysis, instead of applied, as RollbackPolicy.ProposeOnly does for
// every agent of the Loop; an approved one (Approve) is verified like any
// change. An agent is propose-only when either says so: off here does not
// exempt an agent from a loop-wide ProposeOnly. The loop's own route moves
// (a probe of the primary that succeeds) are not tweaks and still happen.
// The setting is saved with the agent's state before SetProposeOnly
// returns (it survives restarts, and a fleet shares it). Default off.
func (l *Loop) SetProposeOnly(agentID string, on bool) error {
	return l.update(agentID, EventProposeOnlySet, fmt.Sprintf("agent %q: propose-only=%v by operator", agentID, on),
		func(s *agentState) { s.ProposeOnly = on })
}

// proposeOnly reports, under a's lock, whether its tweaks are filed for
// approval (see ruleBook.proposeOnly).
func (l *Loop) proposeOnly(a *agent) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return l.rules.proposeOnly(&a.s)
}
