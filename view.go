package selfimprove

import (
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// AgentView is what the loop knows of one agent, read at once: the one
// per-agent view. Loop.View and Loop.DailySummary fill every field.
// Loop.Views, for metrics exporters, fills only those it reads without
// the agent's lock: AgentID, Loaded, Config, Circuit, and the counters
// Successes, Failures, Ignored, Latency and FirstToken.
type AgentView struct {
	AgentID string
	// Loaded reports that the agent is in memory (else it was read from
	// the store).
	Loaded bool
	// Config is the config in force. Like the config fn is given, its
	// Params map must not be modified.
	Config Config
	// Stats are over the analysis window; Health as Loop.Health.
	Stats  Stats
	Health float64
	// Threshold is the threshold in force and Profile its profile;
	// Critical reports the mark of MarkCritical, Manual a threshold set
	// with SetThreshold.
	Threshold Threshold
	Profile   Profile
	Critical  bool
	Manual    bool
	// ProposeOnly reports the mode SetProposeOnly set for the agent
	// (not the loop-wide RollbackPolicy.ProposeOnly).
	ProposeOnly bool
	// Change is the change under verification, else the latest decided
	// change; nil when the agent has had none.
	Change *Change
	// Circuit is the state of the agent's circuit breaker (always
	// CircuitClosed without WithCircuitBreaker).
	Circuit Circuit
	// Proposals counts the agent's pending proposals.
	Proposals int
	// Applied, Confirmed and RolledBack count the changes applied,
	// confirmed and rolled back in the last 24 hours (SetConfig's are
	// not counted).
	Applied, Confirmed, RolledBack int
	// Successes, Failures and Ignored count the agent's calls by outcome
	// since it was loaded in this process (Ignored: cancelled by their
	// caller's context, see Report.Ignored); Stats counts the window's.
	// They start again from zero when an idle agent is evicted and
	// loaded again, and are zero for an agent not in memory.
	Successes, Failures, Ignored int64
	// Latency is the histogram of the durations of those successful and
	// failed calls (each whole call: every attempt and the waits).
	Latency Histogram
	// FirstToken is the histogram of the times to first token of those
	// calls' attempts (Sum/Count is the mean): of each attempt that
	// reported its first token (stream.FirstToken) under a config with a
	// FirstTokenTimeout, the time from its start to the report. It is the
	// zero Histogram (Count 0, no Bounds nor Counts) for an agent with no
	// such attempt.
	FirstToken Histogram
	// Next is what the loop will do next for the agent, in plain text,
	// such as "cooling down; next: route "gpt-4o-mini" if the current one
	// keeps failing", and NextAt when it may happen (zero: at the next
	// call that calls for it).
	Next   string
	NextAt time.Time
	// Home is the route the agent returns to once a probe of it succeeds,
	// while it is away from it (see ProbePolicy); "" otherwise. Held is
	// the class the agent is held for ("" when it is not).
	Home string
	Held failure.Class
	// DeadRoutes are the routes dead for the agent now: its own finds and
	// the Loop's.
	DeadRoutes []DeadRoute
	// Versions are the quality and cost figures (Stats's Scored to
	// CostPerSuccess, the rest zero) of the config versions the agent
	// has scored or costed calls for, by version, at most 16; Routes sums
	// them by the versions' routes. nil when none (see docs/quality.md).
	Versions map[int]Stats
	Routes   map[string]Stats
}

// View returns what the loop knows of agentID, read at once, and whether
// the loop knows the agent (in memory, or in the store before Close).
// Like the other getters it creates no agent and writes nothing.
func (l *Loop) View(agentID string) (AgentView, bool) {
	now := l.clock.Now()
	v := AgentView{AgentID: agentID}
	known := l.viewStats(agentID, func(s *agentState) {
		v.fillLocked(s, now)
		v.routesLocked(s, now, &l.rules)
	})
	if a, ok := l.agents.Load(agentID); ok && known {
		v.Loaded = true
		a.(*agent).counters(&v)
	}
	return v, known
}

// Views returns a view of each agent in memory, in no particular order,
// with only the fields read without the agent's lock (see AgentView): it
// takes no agent's lock, reads no store, and costs about a microsecond an
// agent. Each view it yields is a fresh copy. Agents only in the store
// have no counters in this process and are not listed.
func (l *Loop) Views() iter.Seq[AgentView] {
	return func(yield func(AgentView) bool) {
		now := l.clock.Now().UnixNano()
		l.agents.Range(func(_, x any) bool {
			a := x.(*agent)
			v := AgentView{AgentID: a.id, Loaded: true, Config: a.cfg.Load().Config,
				Circuit: circuitAt(a.openUntil.Load(), now)}
			a.counters(&v)
			return yield(v)
		})
	}
}

// fillLocked fills v's fields from s, the agent's state, at time now.
func (v *AgentView) fillLocked(s *agentState, now time.Time) {
	n := now.UnixNano()
	v.Config = s.Config.clone()
	v.Stats = s.stats(n)
	v.Versions, v.Routes = s.qualityViews()
	v.Health = s.health(n)
	v.Threshold, v.Profile = s.threshold(n)
	v.Critical, v.Manual, v.ProposeOnly = s.Critical, s.Manual != nil, s.ProposeOnly
	if s.Verifying != nil {
		ch := s.verifying()
		v.Change = &ch
	} else if k := len(s.Changes); k > 0 {
		ch := s.Changes[k-1]
		v.Change = &ch
	}
	v.Circuit = circuitAt(s.CircuitOpenUntil, n)
	for _, p := range s.Proposals {
		if p.Status == ProposalPending {
			v.Proposals++
		}
	}
	since := now.Add(-24 * time.Hour)
	count := func(c *Change) {
		if c.Reason == "set by operator" {
			return
		}
		if c.AppliedAt.After(since) {
			v.Applied++
		}
		if c.DecidedAt.After(since) {
			switch c.State {
			case ChangeConfirmed:
				v.Confirmed++
			case ChangeRolledBack:
				v.RolledBack++
			}
		}
	}
	for i := range s.Changes {
		count(&s.Changes[i])
	}
	if s.Verifying != nil {
		count(s.Verifying)
	}
}

// circuitAt is the state at time now (Unix ns) of a circuit open until
// until (0: closed).
func circuitAt(until, now int64) Circuit {
	switch {
	case until == 0:
		return CircuitClosed
	case now < until:
		return CircuitOpen
	}
	return CircuitHalfOpen
}

// routesLocked fills v's route fields and its next step from s at now.
func (v *AgentView) routesLocked(s *agentState, now time.Time, r *ruleBook) {
	n := now.UnixNano()
	if rs := s.Route; rs != nil {
		if rs.Away {
			v.Home = s.routeName(rs.Home, r)
		}
		v.Held = rs.Hold
	}
	for _, d := range s.deadList() {
		if d.Until > n {
			v.DeadRoutes = append(v.DeadRoutes, DeadRoute{Route: d.Route, Until: time.Unix(0, d.Until).UTC(), Reason: d.Why})
		}
	}
	for _, d := range r.dead.list(n) {
		if !slices.ContainsFunc(v.DeadRoutes, func(x DeadRoute) bool { return x.Route == d.Route }) {
			v.DeadRoutes = append(v.DeadRoutes, d)
		}
	}
	v.Next, v.NextAt = s.next(n, r)
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

// DeadRoutes returns the routes the Loop found dead and that are still
// dead (see ProbePolicy), by route.
func (l *Loop) DeadRoutes() []DeadRoute {
	return l.dead.list(l.clock.Now().UnixNano())
}
