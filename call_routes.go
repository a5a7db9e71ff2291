package selfimprove

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// failFast is the error of a call whose agent's circuit is open: a
// *holdError while the agent is held for an account-wide cause, else
// ErrCircuitOpen. The call's budget, if any, gets its attempt back, and
// the attempt the call is nested in, if any, is told of the failure.
func (l *Loop) failFast(ctx context.Context, a *agent, att *callCtx) error {
	att.unbudget()
	a.mu.Lock()
	var class failure.Class
	if a.s.Route != nil {
		class = a.s.Route.Hold
	}
	until := a.s.openUntil(l.clock.Now().UnixNano())
	a.mu.Unlock()
	var err error = ErrCircuitOpen
	if class != "" {
		err = &holdError{AgentID: a.id, Class: class, Until: time.Unix(0, until).UTC()}
	}
	if p, _ := ctx.Value(callKey{}).(*callCtx); p != nil {
		p.note(a.id, err)
	}
	return err
}

// runProbe makes a call whose first attempt probes the route home (see
// ProbePolicy), under cfg's deadline. When that attempt fails, the call
// goes on under cfg, with all of cfg's attempts: the probe costs the
// caller time, not a failure. The probe's failure is described in c.
func (l *Loop) runProbe(ctx context.Context, cfg *Config, home string, fn func(context.Context, Config) error, n *int, c *begun) (error, bool) {
	p := *cfg
	p.Route = home
	actx := ctx
	if c.att != nil {
		actx = c.att
	}
	err := l.runOnce(actx, &p, fn, c)
	*n = 1
	if err == nil || ctx.Err() != nil {
		c.route = home
		return err, false
	}
	f := l.describe(err, 0, c)
	c.probeClass, c.probeText = f.Class, f.Text
	if c.probeClass == "" {
		c.probeClass = failure.ClassOther
	}
	if c.att != nil {
		if c.att.next(); c.att.budget != nil && !c.att.budget.take(c.att, 1) {
			return err, true
		}
	}
	err, exhausted := l.run(ctx, cfg, fn, n, c, c.att)
	*n++
	return err, exhausted
}

// routeEffects carries out what a call's transition found of routes and
// causes: it marks dead routes loop-wide, and raises an account-wide
// cause once, with one proposal, or ends it. With a fleet, dead routes
// and causes go to the fleet's notes too, and the fleet says which
// replica raises a cause or its end (postDead, postCause). w is the
// call's waits (see waits).
func (l *Loop) routeEffects(a *agent, eff *effects, now time.Time, w waits) {
	for _, d := range eff.dead {
		l.dead.mark(d.route, d.until, d.why, d.class, now.UnixNano())
		l.postDead(d, now)
	}
	h := eff.hold
	if h == nil {
		return
	}
	id := failure.FormatClusterID(h.cluster)
	if h.ended {
		for _, c := range l.causes.leave(a.id) {
			if !l.postCause(a, h, c, "", now, now) {
				l.causeEnded(a, h, c, now)
			}
		}
		return
	}
	if l.causes.join(id, h.class, a.id, now.UnixNano()) && !l.postCause(a, h, id, h.text, now.Add(l.rules.probes.causeTTL()), now) {
		l.accountCause(a, h, id, now, w)
	}
}

// accountCause raises a new account-wide cause: one event, and one
// proposal on the agent that found it. Its save's waits on the fleet
// are w's (zero: its own; see waits).
func (l *Loop) accountCause(a *agent, h *holdNote, id string, now time.Time, w waits) {
	in := input{kind: inCause, now: now.UnixNano(), more: &inputMore{h: h, cause: id}}
	var rep Report
	if _, err := l.step(context.Background(), a, a.id, &in, &rep, w); err != nil {
		l.log.Warn("selfimprove: account-wide cause not filed", "agent", a.id, "error", err)
	} else if rep.LoopErr != nil {
		l.log.Warn("selfimprove: account-wide cause not saved", "agent", a.id, "error", rep.LoopErr)
	}
}

// applyCause files the account-wide cause of in on a: one event, and one
// proposal. a.mu is held.
func (a *agent) applyCause(l *Loop, in *input, eff *effects) {
	h, now := in.more.h, time.Unix(0, in.now)
	reason := fmt.Sprintf("account-wide %s: agent %q and any other agent with this failure are held, one probe each per interval (%v, doubling to %v): %s",
		h.class, a.id, l.rules.probes.Every, l.rules.probes.MaxEvery, h.text)
	th, prof := a.s.threshold(in.now)
	an := a.s.analysis(now, th, prof)
	tw := &Tweak{Config: a.s.Config, Review: true, Cluster: in.more.cause, Confidence: 1, Reason: loopText(reason), Rule: rules[h.class]}
	p, isNew := a.s.file(an, tw, now, &l.rules)
	eff.event(&Event{ID: newID(now), Time: now.UTC(), Type: EventAccountCause, AgentID: a.id, Message: loopText(reason)})
	if isNew {
		eff.proposals = append(eff.proposals, p.clone())
		eff.event(proposalEvent(newID(now), now, EventProposalFiled, p))
	}
	eff.save = true
}

// fallBack returns the route the next attempt of a call runs on, when it
// is not the call's own: the next live route of the agent's ladder, for
// the call's last attempt after a failure another route may fix, or for
// any attempt after "no such model" or one that got no answer in time (no
// response before its Timeout, no first token before its
// FirstTokenTimeout: a silent route is not asked twice), and for the
// first attempt after a transient failure when the agent's last call was
// answered only on the next route (b.hurry: the route is failing now,
// and a retry on it would only delay the answer). It returns false
// for the call's own route, and for a probe of the primary, whose
// fallback is the agent's config.
func (l *Loop) fallBack(b *begun, cfg *Config, class failure.Class, last bool, needs *Needs) (string, bool) {
	if b == nil || b.homeProbe {
		return "", false
	}
	switch {
	case class == failure.ClassModelUnavailable, class == failure.ClassNotFound, class == failure.ClassContextLength, b.silent, b.stalled, b.idled:
	case (last || b.hurry) && (transient(class) || class == failure.ClassRateLimit):
	default:
		return "", false
	}
	lad := l.routes.of(b.id)
	if lad.empty() {
		return "", false
	}
	ladder := lad.ladder()
	now := l.clock.Now().UnixNano()
	for _, r := range ladder[slices.Index(ladder, lad.name(cfg.Route))+1:] {
		if _, dead := l.dead.dead(r, now); !dead && lad.fit(r, needs) && (class != failure.ClassContextLength || lad.larger(r, cfg.Route)) {
			return r, true
		}
	}
	return "", false
}

// fitRoute returns the config a call c with needs runs under when cfg's
// route does not fit them: cfg on the first route of the agent's ladder
// that fits and is not dead, from cfg's route down, then from the primary
// (the call's own move: c.fitted). cfg itself when its route fits or none
// does.
func (l *Loop) fitRoute(c *begun, cfg *Config, needs *Needs) *Config {
	lad := l.routes.of(c.id)
	if lad == nil || lad.fit(cfg.Route, needs) {
		return cfg
	}
	ladder := lad.ladder()
	order := ladder // a route not on the ladder: the ladder from the primary
	if at := slices.Index(ladder, lad.name(cfg.Route)); at >= 0 {
		order = slices.Concat(ladder[at+1:], ladder[:at])
	}
	now := l.clock.Now().UnixNano()
	for _, r := range order {
		if _, dead := l.dead.dead(r, now); !dead && lad.fit(r, needs) {
			cp := *cfg
			cp.Route, c.route, c.fitted = r, r, true
			return &cp
		}
	}
	return cfg
}

// cooled returns the config a call c of a runs under while a's own route
// cools down after a call it left without an answer (flagCool): cfg on
// the next live route of the ladder until routeState.coolUntil; cfg
// itself after. The call is no evidence about a's route (c.fitted): it
// neither counts as a strike against it nor ends a run of them.
func (l *Loop) cooled(a *agent, c *begun, cfg *Config, needs *Needs) *Config {
	var until int64
	a.mu.Lock()
	if a.s.Route != nil {
		until = a.s.Route.coolUntil
	}
	a.mu.Unlock()
	if l.clock.Now().UnixNano() >= until {
		a.set(flagCool, false) // over: the lock-free path again
		return cfg
	}
	alt, ok := l.fallBack(c, cfg, failure.ClassTimeout, true, needs)
	if !ok {
		return cfg
	}
	cp := *cfg
	cp.Route = alt
	c.route, c.fitted = alt, true
	return &cp
}

// offRoute returns the config a call c of a runs under when it may run
// off its route for a reason of its own: the route cools down (flag
// f&flagCool; see Loop.cooled), or its request does not fit it (see
// Loop.fitRoute).
func (l *Loop) offRoute(a *agent, c *begun, cfg *Config, f uint32, needs *Needs) *Config {
	if f&flagCool != 0 && !c.probe && !c.fellBack {
		cfg = l.cooled(a, c, cfg, needs)
	}
	if needs != nil {
		cfg = l.fitRoute(c, cfg, needs)
	}
	return cfg
}

// applyClaim claims the probe a call is about to run, in a fleet (x.home:
// of the primary route; else a held agent's): the next probe time moves
// one interval on (x.due; not when no probe is due any more), committed
// by the save that takes the state under the same lock
// (fleetLink.claimProbe). A breaker's probe is not claimed (x.breaker):
// the breaker is each replica's own. a.mu is held.
func (a *agent) applyClaim(l *Loop, in *input, eff *effects) {
	x := in.more
	if !x.home && (a.s.Route == nil || a.s.Route.Hold == "") {
		x.breaker = true
		return
	}
	if x.due = a.s.claimProbe(in.now, x.home, &l.rules); x.due {
		eff.probe, eff.circuit = x.home, !x.home
		a.dirty = true
	}
}
