package selfimprove

import (
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The routes' transitions of an agent's state: dead routes, the way back
// to the primary after a temporary move, and holds for account-wide
// causes (see ProbePolicy). Pure like the rest of state.go.

// routeState is an agent's routes, probes and hold.
type routeState struct {
	// Home is the Config.Route to return to while Away: the agent was
	// moved off it for a transient cause.
	Home string
	Away bool
	// ProbeAt is when the next probe of Home may run (Unix ns); Every
	// is the interval that led to it.
	ProbeAt, Every int64
	// Returning: the change under verification returns to Home.
	Returning bool
	// Failed counts the returns to Home rolled back since the agent went
	// away from it, and Good the good probes of Home in a row since the
	// last failed one or return: a return takes 1 + Failed of them (at
	// most maxReturnProbes), so that a primary that answers half its
	// requests is not returned to on each lucky probe.
	Failed, Good int
	// Dead are the routes this agent found dead, at most maxAgentDead.
	Dead []routeDead
	// Hold is the class the agent is held for ("" when it is not);
	// HoldCluster its cluster and HoldEvery the interval that led to
	// CircuitOpenUntil. Run counts failures of a held class in a row.
	Hold        failure.Class
	HoldCluster uint64
	HoldEvery   int64
	Run         int
	// Strikes counts the calls in a row that succeeded only on the next
	// route of the ladder (see Loop.fallBack).
	Strikes int
	// coolUntil is when the agent's calls try its own route again after
	// a call it left without an answer (flagCool; Unix ns; not stored).
	coolUntil int64
}

// routeDead is a route one agent found dead.
type routeDead struct {
	Route string
	Until int64
	Why   string
}

// maxAgentDead bounds an agent's own dead routes.
const maxAgentDead = 8

// deadNote is a route to mark dead loop-wide.
type deadNote struct {
	route string
	until int64
	why   string
	class failure.Class
}

// holdNote is a hold that began or ended, for the Loop's causes.
type holdNote struct {
	cluster uint64
	class   failure.Class
	text    string
	ended   bool
}

// ladder is the agent's route ladder, or nil.
func (s *agentState) ladder(r *ruleBook) *Routes { return r.routes.of(s.AgentID) }

// route returns the agent's route state, made when it has none.
func (s *agentState) route() *routeState {
	if s.Route == nil {
		s.Route = &routeState{}
	}
	return s.Route
}

// returning reports whether the change under verification returns to the
// primary.
func (s *agentState) returning() bool { return s.Route != nil && s.Route.Returning }

// deadList is the routes the agent found dead.
func (s *agentState) deadList() []routeDead {
	if s.Route == nil {
		return nil
	}
	return s.Route.Dead
}

// away reports whether the agent is away from its primary.
func (s *agentState) away() bool { return s.Route != nil && s.Route.Away }

// routeName is route's name on the agent's ladder: the primary for "".
func (s *agentState) routeName(route string, r *ruleBook) string {
	if l := s.ladder(r); l != nil {
		return l.name(route)
	}
	return route
}

// deadAt returns why route is dead at now (Unix ns), for this agent or
// loop-wide, and whether it is.
func (s *agentState) deadAt(route string, now int64, r *ruleBook) (string, bool) {
	d, ok := s.deadUntil(route, now, r)
	return d.Why, ok
}

// deadUntil returns route's dead entry at now (Unix ns) that ends last,
// for this agent or loop-wide, and whether route is dead.
func (s *agentState) deadUntil(route string, now int64, r *ruleBook) (deadRoute, bool) {
	name := s.routeName(route, r)
	var out deadRoute
	for _, d := range s.deadList() {
		if d.Route == name && d.Until > now && d.Until > out.Until {
			out = deadRoute{Until: d.Until, Why: d.Why}
		}
	}
	if r.dead != nil {
		if d, ok := r.dead.dead(name, now); ok && d.Until > out.Until {
			out = d
		}
	}
	return out, out.Until > now
}

// deadClass reports whether a failure of class on route means the route
// is dead: no such model, or (on an agent with a ladder) no such thing.
func (s *agentState) deadClass(class failure.Class, r *ruleBook) bool {
	return class == failure.ClassModelUnavailable || class == failure.ClassNotFound && !s.ladder(r).empty()
}

// routeCall books what a finished call says of its routes: a dead route,
// a probe of the primary, the run of failures that holds the agent. A
// failure passed on from a nested call says nothing of them.
func (s *agentState) routeCall(c *call, r *ruleBook, eff *effects) {
	if c.homeProbe {
		s.homeProbed(c, r, eff)
	}
	if c.fellBack && s.deadClass(c.fellClass, r) {
		// A withdrawn model is dead whatever became of the call, answered
		// by the next route or not (once: a call that skipped it because it
		// was dead leaves it so). The call fell back on its own route's
		// failure, never on one a nested call passed on (Loop.ownFailure).
		if _, dead := s.deadAt(c.fellFrom, c.end.UnixNano(), r); !dead {
			s.markDead(c.fellFrom, c.fellClass, c.fellText, c.end, r, eff)
		}
	}
	if c.failed && c.nested() {
		return
	}
	if !c.failed {
		if s.Route != nil {
			s.Route.Run = 0
		}
		s.strike(c, r, eff)
		return
	}
	if s.Route != nil && !c.fitted {
		s.Route.Strikes = 0 // a call that failed ends a run of calls answered on the next route
	}
	if s.deadClass(c.class, r) {
		s.markDead(c.route, c.class, c.text, c.end, r, eff)
	}
	switch {
	case !r.probes.holds(c.class):
		if s.Route != nil {
			s.Route.Run = 0
		}
	case s.route().Hold == "":
		if s.Route.Run++; s.Route.Run >= holdRun {
			s.hold(c, r, eff)
		}
	}
}

// markDead marks route dead for DeadFor after a failure of class with
// text at now.
func (s *agentState) markDead(route string, class failure.Class, text string, now time.Time, r *ruleBook, eff *effects) {
	name := s.routeName(route, r)
	if name == "" && s.ladder(r).empty() {
		return // an agent off the ladders, on its own model: no route to skip it for
	}
	n := now.UnixNano()
	until := n + int64(r.probes.DeadFor)
	why := loopText(fmt.Sprintf("%s: %s", class, text))
	_, was := s.deadAt(route, n, r)
	rs := s.route()
	i := slices.IndexFunc(rs.Dead, func(d routeDead) bool { return d.Route == name })
	if i >= 0 {
		rs.Dead[i] = routeDead{name, until, why}
	} else {
		rs.Dead = slices.DeleteFunc(rs.Dead, func(d routeDead) bool { return d.Until <= n })
		rs.Dead = appendBounded(rs.Dead, routeDead{name, until, why}, maxAgentDead)
	}
	if name != "" {
		// The unnamed route is each agent's own model (fn's default): no
		// name that is dead for every agent. It is dead for this one.
		eff.dead = append(eff.dead, deadNote{name, until, why, class})
	}
	eff.save = true
	if rs.Away && s.routeName(rs.Home, r) == name {
		// No probe of a dead route: the next once it has expired (a
		// withdrawn model may be reinstated).
		rs.ProbeAt, rs.Every = max(rs.ProbeAt, until), int64(r.probes.Every)
		eff.probe = true
	}
	if !was {
		eff.event(&Event{ID: r.newID(now), Time: now.UTC(), Type: EventRouteDead, AgentID: s.AgentID,
			Message: fmt.Sprintf("agent %q: route %q is dead until %s: %s", s.AgentID, name,
				time.Unix(0, until).UTC().Format(time.RFC3339), why)})
	}
}

// hold holds the agent after the failure c of a held class: its calls
// fail at once, but for one probe per interval.
func (s *agentState) hold(c *call, r *ruleBook, eff *effects) {
	every := r.probes.Every
	rs := s.route()
	rs.Hold, rs.HoldCluster, rs.HoldEvery = c.class, c.cluster, int64(every)
	s.CircuitOpenUntil = c.end.Add(every).UnixNano()
	eff.circuit, eff.save = true, true
	eff.hold = &holdNote{cluster: c.cluster, class: c.class, text: c.text}
	eff.event(&Event{ID: r.newID(c.end), Time: c.end.UTC(), Type: EventCircuitOpened, AgentID: s.AgentID,
		Message: fmt.Sprintf("agent %q: held for %s: %d failures in a row; one probe every %v: %s", s.AgentID, c.class, rs.Run, every, c.text)})
}

// holdProbed takes the outcome of a held agent's probe: a failure of the
// held class holds it for a longer interval; anything else releases it.
func (s *agentState) holdProbed(c *call, r *ruleBook, eff *effects) {
	eff.circuit, eff.save = true, true
	rs := s.Route
	if c.failed && c.class == rs.Hold {
		every := r.probes.next(time.Duration(rs.HoldEvery))
		rs.HoldEvery = int64(every)
		s.CircuitOpenUntil = c.end.Add(every).UnixNano()
		return
	}
	class := rs.Hold
	eff.hold = &holdNote{cluster: rs.HoldCluster, class: class, ended: true}
	rs.Hold, rs.HoldCluster, rs.HoldEvery, rs.Run = "", 0, 0, 0
	s.CircuitOpenUntil = 0
	eff.event(&Event{ID: r.newID(c.end), Time: c.end.UTC(), Type: EventCircuitClosed, AgentID: s.AgentID,
		Message: fmt.Sprintf("agent %q: released: the probe got past the %s failure", s.AgentID, class)})
}

// homeProbed takes the outcome of a probe of Home: a good one starts the
// return, a failed one doubles the interval.
func (s *agentState) homeProbed(c *call, r *ruleBook, eff *effects) {
	if !s.away() {
		return
	}
	eff.probe, eff.save = true, true
	n := c.end.UnixNano()
	if c.probeClass != "" {
		if s.deadClass(c.probeClass, r) {
			s.markDead(s.Route.Home, c.probeClass, c.probeText, c.end, r, eff)
			return
		}
		s.Route.Good = 0
		s.probeLater(n, r)
		return
	}
	if _, dead := s.deadAt(s.Route.Home, n, r); dead || s.Verifying != nil && !s.movingAway() {
		s.probeLater(n, r)
		return
	}
	if s.Route.Good++; s.Route.Good < min(1+s.Route.Failed, maxReturnProbes) {
		// Not yet enough good probes in a row: the next one soon.
		s.Route.ProbeAt = n + int64(r.probes.ReturnEvery)
		return
	}
	s.Route.Good = 0
	if s.Verifying != nil {
		// The primary answered while the move off it was verified: the
		// move's cause has passed, and the return supersedes it.
		s.decide(c.end, ChangeSuperseded, fmt.Sprintf("route %q answered a probe, so the agent returns to it before the verdict; superseded by the return", s.routeName(s.Route.Home, r)), eff)
	}
	s.returnHome(c.end, r, eff)
}

// maxReturnProbes is the most good probes in a row a return takes (see
// routeState.Failed).
const maxReturnProbes = 3

// probeLater schedules the next probe of Home after a longer interval
// (ProbePolicy.ReturnEvery, 1.5 times longer each time).
func (s *agentState) probeLater(now int64, r *ruleBook) {
	s.Route.Every = int64(r.probes.nextReturn(time.Duration(s.Route.Every)))
	base := now
	if at := s.Route.ProbeAt; at != 0 && at <= now && now-at < s.Route.Every {
		// From when the probe was due, not from the request that made
		// it: the schedule does not drift by the gaps between requests.
		base = at
	}
	s.Route.ProbeAt = base + s.Route.Every
}

// awayFrom notes that the agent, moved off the live route home by a
// change just applied, is away from it from now on: its first probe is
// due ProbePolicy.ReturnEvery later, while the move is still verified.
func (s *agentState) awayFrom(home string, now int64, r *ruleBook, eff *effects) {
	rs := s.route()
	rs.Home, rs.Away, rs.Failed, rs.Good = home, true, 0, 0
	rs.Every = int64(r.probes.ReturnEvery)
	rs.ProbeAt = now + rs.Every
	eff.probe = true
}

// movingAway reports whether the change under verification is the move
// off Home (the config it replaced ran on Home), which a successful
// probe of Home supersedes.
func (s *agentState) movingAway() bool {
	v := s.Verifying
	return v != nil && s.away() && !s.returning() && v.From.Route == s.Route.Home
}

// returnHome installs the current config with Route Home as a change
// under verification.
func (s *agentState) returnHome(now time.Time, r *ruleBook, eff *effects) {
	s.Route.Returning = true
	s.installChange(now, s.Route.Home, fmt.Sprintf("return to route %q: a probe of it succeeded", s.routeName(s.Route.Home, r)), "", r, eff)
}

// moved notes a decided change ch for the route: a confirmed move off a
// live route is temporary, unless the cluster it addressed is of a class
// that does not pass on its own; a return ends the stay away, or, rolled
// back, probes again later.
func (s *agentState) moved(ch *Change, state ChangeState, now time.Time, r *ruleBook, eff *effects) {
	n := now.UnixNano()
	if s.returning() {
		s.Route.Returning = false
		eff.probe = true
		if state == ChangeConfirmed {
			s.Route.Away, s.Route.ProbeAt, s.Route.Every, s.Route.Failed, s.Route.Good = false, 0, 0, 0, 0
		} else {
			s.Route.Failed = min(s.Route.Failed+1, maxReturnProbes)
			s.probeLater(n, r)
		}
		return
	}
	if state != ChangeConfirmed && s.away() && s.routeName(ch.From.Route, r) == s.routeName(s.Route.Home, r) {
		// The move off home did not hold: the agent is home again.
		s.Route.Away, s.Route.ProbeAt, s.Route.Every, s.Route.Failed, s.Route.Good = false, 0, 0, 0, 0
		eff.probe = true
		return
	}
	if state != ChangeConfirmed || s.routeName(ch.From.Route, r) == s.routeName(ch.To.Route, r) {
		return
	}
	if s.away() {
		return // moved on down the ladder, or away since the move: still away from the same home
	}
	probeAt := n + int64(r.probes.ReturnEvery)
	if d, dead := s.deadUntil(ch.From.Route, n, r); dead {
		// A move off a dead route (a withdrawn model) is temporary too:
		// its first probe waits for the route's dead time to end.
		probeAt = d.Until
	} else if cl := s.clusterByID(ch.Cluster); cl != nil && !transient(cl.Class) || s.qualityMove(ch) || s.explores(ch) {
		return // no probe of the old route can tell that its answers are good again
	}
	rs := s.route()
	rs.Home, rs.Away, rs.Failed, rs.Good = ch.From.Route, true, 0, 0
	rs.Every = int64(r.probes.ReturnEvery)
	rs.ProbeAt = probeAt
	eff.probe = true
}

// clusterByID returns the agent's cluster with the ID (16 hex digits), or
// nil.
func (s *agentState) clusterByID(id string) *clusterRec {
	v, err := failure.ParseClusterID(id)
	if err != nil {
		return nil
	}
	for i := range s.Clusters {
		if s.Clusters[i].ID == v {
			return &s.Clusters[i]
		}
	}
	return nil
}

// nextLive returns the first live route of the ladder below the current
// one (from the top when the current one is not on it) that is not
// avoid, or "" and false.
func (s *agentState) nextLive(now int64, r *ruleBook, avoid ...string) (string, bool) {
	l := s.ladder(r)
	if l.empty() {
		return "", false
	}
	ladder := l.ladder()
	for _, route := range ladder[slices.Index(ladder, s.routeName(s.Config.Route, r))+1:] {
		if slices.ContainsFunc(avoid, func(a string) bool { return s.routeName(a, r) == route }) {
			continue
		}
		if _, dead := s.deadAt(route, now, r); !dead {
			return route, true
		}
	}
	return "", false
}

// rollForward decides the change under verification when rolling it back
// would install a dead route: it installs the previous config on the next
// live route instead, verified as a new change, or, with none left, keeps
// the change and files a proposal. It reports whether it did either.
func (s *agentState) rollForward(now time.Time, reason string, r *ruleBook, eff *effects) bool {
	v := s.Verifying
	n := now.UnixNano()
	why, dead := s.deadAt(v.From.Route, n, r)
	if !dead || s.returning() {
		return false
	}
	from, to := v.From.clone(), v.To.Route
	if route, ok := s.nextLive(n, r, to, from.Route); ok {
		cluster := v.Cluster
		s.rollbackTo(now, reason, r, eff) // installs from
		why := loopText(fmt.Sprintf("moved on to route %q, as rolling back would return to route %q, which is dead; rolled forward: route %q is dead (%s); next live route %q",
			route, s.routeName(from.Route, r), s.routeName(from.Route, r), why, route))
		s.installChange(now, route, why, cluster, r, eff)
		eff.applied = nil // the rollback is the decision to report
		return true
	}
	kept := fmt.Sprintf("kept, though it fails: rolling back would return to route %q, which is dead, and no live route is left; route %q is dead (%s); %s",
		s.routeName(from.Route, r), s.routeName(from.Route, r), why, reason)
	ch := s.decide(now, ChangeConfirmed, kept, eff)
	eff.decided, eff.decision, eff.save = ch, EventChangeConfirmed, true
	eff.event(newEvent(r.newID(now), now, EventChangeConfirmed, ch))
	th, prof := s.threshold(n)
	an := s.analysis(now, th, prof)
	tw := &Tweak{Config: s.Config, Review: true, Cluster: ch.Cluster, Confidence: 1,
		Reason: loopText(fmt.Sprintf("route %q fails and the route before it, %q, is dead: no live route is left; %s; %q is dead (%s)", s.routeName(to, r), s.routeName(from.Route, r), reason, s.routeName(from.Route, r), why)),
		Rule:   rules[failure.ClassModelUnavailable]}
	if p, isNew := s.file(an, tw, now, r); isNew {
		eff.proposals = append(eff.proposals, p.clone())
		eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, p))
	}
	return true
}

// stayHome ends a stay away from the primary: an operator chose the
// config.
func (s *agentState) stayHome(eff *effects) {
	if s.away() || s.returning() {
		s.Route.Away, s.Route.Returning, s.Route.ProbeAt, s.Route.Every, s.Route.Failed, s.Route.Good = false, false, 0, 0, 0, 0
		eff.probe = true
	}
}

// strike books a successful call: one that needed the next route of the
// ladder is a strike against its own route, and moveRun strikes in a row
// (one, when the route is dead) move the agent to that route, as a change verified like any other
// (the move is temporary: see moved). A call that succeeded on its own
// route clears the strikes, as one that failed does (routeCall).
func (s *agentState) strike(c *call, r *ruleBook, eff *effects) {
	if c.fitted {
		return // it ran off the agent's route for a reason of its own: no evidence about that route
	}
	if !c.fellBack {
		if s.Route != nil && !c.fitted {
			s.Route.Strikes = 0
		}
		return
	}
	rs := s.route()
	need := moveRun
	if s.deadClass(c.fellClass, r) {
		need = 1 // the route is dead: no reason to wait
	}
	if rs.Strikes++; rs.Strikes < need || s.Verifying != nil || s.analyzing || c.gen != s.Gen {
		return
	}
	if _, dead := s.deadAt(c.fellRoute, c.end.UnixNano(), r); dead {
		return
	}
	rs.Strikes = 0
	home := s.Config.Route
	reason := fmt.Sprintf("moved to route %q, where %s; %s on route %q",
		c.fellRoute, lastCalls(need, fmt.Sprintf("succeeded after failing on route %q", s.routeName(home, r))), c.fellClass, s.routeName(home, r))
	if c.skipped {
		// It never asked the route: another call marked it dead.
		reason = fmt.Sprintf("moved to route %q, as route %q is marked dead (%s): the last call went to %q without asking it",
			c.fellRoute, s.routeName(home, r), c.fellClass, c.fellRoute)
	}
	cluster := "" // the move fixes the failures on the route it leaves: the memory credits their cluster
	if c.fellCluster != 0 {
		cluster = failure.FormatClusterID(c.fellCluster)
	}
	s.installChange(c.end, c.fellRoute, loopText(reason), cluster, r, eff)
	if transient(c.fellClass) && !s.away() {
		s.awayFrom(home, c.end.UnixNano(), r, eff) // probed from now on (see ProbePolicy.ReturnEvery)
	}
}

// ownSuccesses books calls that succeeded on their own route at their
// first attempt, booked without the lock (the lock-free path): as any
// success on its own route, they end the strikes' run (see strike), so
// that the run is of calls in a row, whichever path booked them.
func (s *agentState) ownSuccesses() {
	if s.Route != nil {
		s.Route.Strikes = 0
	}
}

// installChange installs the current config with route as a change under
// verification, made by the loop itself for reason, for the failures of
// cluster (an ID; "" for none: the memory credits it to no cluster).
func (s *agentState) installChange(now time.Time, route, reason, cluster string, r *ruleBook, eff *effects) *Change {
	cfg := s.Config.clone()
	cfg.Route = route
	s.MaxVersion++
	cfg.Version = s.MaxVersion
	n := now.UnixNano()
	win := s.Tracker.stats(n)
	before := s.Tracker.regime(s.Tracker.faultStart(n-int64(s.Tracker.Win.Width*windowSlots)), r.policy.BeforeCalls)
	if r.policy.SeedCompatible {
		before = win
	}
	ch := &Change{ID: r.newID(now), AgentID: s.AgentID, From: s.Config, To: cfg, Reason: reason, Cluster: cluster,
		Before: before, Window: &win, AppliedAt: now.UTC(), State: ChangeVerifying}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	v := *ch
	s.endVerify()
	s.Verifying = &v
	s.install(cfg, eff)
	eff.applied, eff.save = ch, true
	eff.event(newEvent(r.newID(now), now, EventImprovementApplied, ch))
	return ch
}

// claimProbe moves the next probe, of the primary (home) or of the hold,
// one interval on from now, and reports whether one was due.
func (s *agentState) claimProbe(now int64, home bool, r *ruleBook) bool {
	rs := s.Route
	switch {
	case rs == nil:
		return false
	case home:
		if !rs.Away || now < rs.ProbeAt {
			return false
		}
		rs.ProbeAt = now + max(rs.Every, int64(r.probes.ReturnEvery))
	default:
		if rs.Hold == "" || now < s.openUntil(now) {
			return false
		}
		s.CircuitOpenUntil = now + max(rs.HoldEvery, int64(r.probes.Every))
	}
	return true
}

// A wall clock that steps back (an NTP step, a VM's clock set right) would
// keep a wait stored as a wall-clock time (an open circuit's end) going for
// the step's length on top of itself. The loop takes a reading more than
// steppedBack before the end of an agent's last call booked as such a step.

// steppedBack is how far behind the end of the last call booked a reading
// of the clock must be for the loop to take the wall clock as stepped back
// (an NTP step, a VM's clock set right): well beyond a call that ends while
// another reads the clock, or the skew between replicas of a fleet (whose
// failures an agent books with their own clocks' times).
const steppedBack = int64(time.Minute)

// waitUntil returns until, when a wait that began at or before the last
// call booked ends (Unix ns; 0: none), as seen at now: now itself, when
// now is more than steppedBack behind that call's end. The wall clock
// stepped back since, and the wait is over as if its time had come: it
// would otherwise last as long as the step on top of itself.
func (t *tracker) waitUntil(until, now int64) int64 {
	last := t.CallEnd[(int(t.CallPos)+maxBeforeCalls-1)%maxBeforeCalls]
	if until <= now || now >= last-steppedBack {
		return until
	}
	return max(now, 1)
}

// openUntil is when the agent's open circuit lets a probe through, as
// seen at now (Unix ns; 0 when closed): CircuitOpenUntil, or now when the
// wall clock stepped back behind the last call booked (tracker.waitUntil):
// the next call probes, and the probe closes the circuit or opens it again
// for a full cool-off from the new time.
func (s *agentState) openUntil(now int64) int64 { return s.Tracker.waitUntil(s.CircuitOpenUntil, now) }
