package selfimprove

import (
	"context"
	"errors"
	"time"

	"fmt"

	"github.com/self-improving-loop/selfimprove/failure"
)

// ExecuteWithImprovement runs fn under agentID's current config and returns
// fn's final error unchanged, with a Report of what the loop did.
//
// The loop enforces the config: each attempt gets a context with the
// config's Timeout (and, with a FirstTokenTimeout, a first-token deadline
// that fn's stream.FirstToken disarms), a failed attempt is retried up to
// MaxAttempts with exponential Backoff, and retries stop when ctx ends. A
// panic in fn is recorded as a failure and re-raised from the frame it
// was raised in, so that its trace still shows fn and its callers; fn
// calling runtime.Goexit is recorded as a failure too. A call
// whose ctx ended before fn succeeded is recorded as ignored, not as a
// failure. A nil fn returns ErrNilFunc and records nothing. A Budget in
// ctx (WithBudget) bounds the attempts and cost of the call and of the
// task it belongs to; a spent budget refuses the call at once, without
// running fn or recording it (see Budget).
//
// A call with an invalid agent ID (empty, or longer than MaxAgentIDLen),
// and a call after Close, still runs fn, untracked, under the default
// config (after Close, the agent's config if it is in memory), and
// returns ErrInvalidAgentID or ErrClosed in Report.LoopErr. Either is
// also logged through the loop's logger (WithLogger), at level Warn, at
// most once a minute per mistake (an invalid ID's first 64 bytes, quoted,
// and its length; for a closed loop, any ID) and at most 64 lines a
// minute in all; the next line counts the calls that were not logged.
//
// A call made with the context fn was given (or one derived from it) is
// nested in this one: when fn returns the nested call's error, or an
// error wrapping it, this call's failure is counted for agentID but
// belongs to the nested call's agent (see Cluster.From): it does not
// trigger agentID's strategy, and the failure memory does not offer
// agentID the fixes learned for it.
//
// After fn returns, the loop records the outcome against the config
// version fn ran under. If a change is under verification, the outcome may
// confirm it or roll it back; otherwise a failure that crosses the agent's
// threshold runs the strategy (at most once at a time per agent) and may
// apply a tweak. Decisions are saved before ExecuteWithImprovement
// returns. The common case (a call with no change under verification and
// no threshold crossed) allocates nothing and does no I/O; with
// TracesSync it waits for its trace to be fsynced, with other callers'.
// An agent's first call in the process waits at most a second for the
// store to load it (and to save the agents it evicts, WithMaxAgents);
// past that, fn runs untracked under the default config, ErrStoreSlow is
// in Report.LoopErr, and the load goes on in the background.
func (l *Loop) ExecuteWithImprovement(ctx context.Context, agentID string, fn func(ctx context.Context, cfg Config) error) (rep Report, _ error) {
	// rep is the result itself: the success path writes it in place and
	// returns without copying it.
	if fn == nil {
		rep.Err, rep.LoopErr = ErrNilFunc, ErrNilFunc
		return rep, ErrNilFunc
	}
	c := begun{id: agentID}
	if b := budgetOf(ctx); b != nil {
		if c.att = b.open(ctx, agentID); c.att == nil {
			rep.Err, rep.BudgetExhausted = ErrBudgetSpent, true
			return rep, rep.Err
		}
	}
	if l.isClosed.Load() || agentID == "" || len(agentID) > MaxAgentIDLen {
		return l.untracked(ctx, agentID, fn, c.att)
	}
	// The agent and the config the call runs under, found here rather
	// than in a function of their own: a call less on the success path.
	a, err := l.agentIn(agentID, &c.w)
	var cfg *Config
	var home string // the primary's route, when the call probes it
	if a != nil {
		if a.openUntil.Load() != 0 && l.refused(ctx, a, &c, &rep) { // set with a breaker or a hold
			return rep, rep.Err
		}
		cfg, home = l.configFor(ctx, a, &c, &rep)
	} else {
		cfg = l.untrackedConfig()
	}
	rep.LoopErr = err
	rep.ConfigVersion = cfg.Version
	c.version, c.arm = cfg.Version, rep.Arm
	rctx, sc := ctx, (*scoreCtx)(nil)
	if a != nil && !l.noSlots {
		rctx, sc = l.slot(ctx, c.att)
	}
	start := l.now()
	done := false
	defer l.unwound(ctx, a, &c, &rep, start, sc, &done)
	if c.homeProbe {
		rep.Err, rep.BudgetExhausted = l.runProbe(rctx, cfg, home, fn, &rep.Attempts, &c)
	} else {
		rep.Err, rep.BudgetExhausted = l.run(rctx, cfg, fn, &rep.Attempts, &c, c.att)
	}
	done = true
	endN, dur := l.since(start)
	if sc != nil {
		c.q = sc.release()
		rep.Cost = c.q.cost
	}
	// The Report is complete before the booking, whose atomic operation
	// commits the writes: the caller then reads it without stalling.
	rep.Duration, rep.Success = dur, rep.Err == nil
	if a != nil {
		rep.ID = callID(endN, c.version, c.key)
	}
	if rep.Success && a != nil && !c.probe && !c.homeProbe && !c.fellBack && !c.fitted && !c.q.any() && a.fast.book(endN, int64(dur), &a.tel.live) {
		// Booked without the lock (see fast.go).
		if !a.used.Load() {
			a.used.Store(true)
		}
		if l.traces != nil {
			l.trace(agentID, c.version, time.Unix(0, endN), &rep, "")
		}
		return rep, nil
	}
	l.finish(ctx, a, agentID, &c, &rep, endN, dur, nil)
	return rep, rep.Err
}

// refused reports whether the open circuit or the hold of a fails the
// call c fast (a half-open circuit lets a probe through): rep is then the
// call's answer.
func (l *Loop) refused(ctx context.Context, a *agent, c *begun, rep *Report) bool {
	var ok bool
	if c.probe, ok = l.admit(a); ok && l.claim(a, c) {
		return false
	}
	rep.Err = l.failFast(ctx, a, c.att)
	rep.ConfigVersion = a.cfg.Load().Version
	rep.Version = rep.ConfigVersion
	return true
}

// untrackedConfig is the config of a call whose agent's state cannot be
// read: fn runs untracked under the default config rather than fail.
func (l *Loop) untrackedConfig() *Config {
	d := l.defaultConfig
	return &d
}

// unwound records the call c when fn did not return (!*done): it
// panicked, and the panic is raised again here, on top of fn's frames
// (the trace still shows where it panicked); or it ended its goroutine
// (runtime.Goexit: t.FailNow in a test), recorded as a failure, with the
// probe or slot it held given back, and the exit goes on.
func (l *Loop) unwound(ctx context.Context, a *agent, c *begun, rep *Report, start reading, sc *scoreCtx, done *bool) {
	if *done {
		return
	}
	pv := recover()
	if pv == nil {
		l.panicked(ctx, a, c, rep, start, sc, goexit{})
		return
	}
	l.panicked(ctx, a, c, rep, start, sc, pv)
	panic(pv)
}

// goexit is the "panic value" of a call whose fn called runtime.Goexit.
type goexit struct{}

func (goexit) String() string { return "fn called runtime.Goexit" }

// panicked records the call c, whose fn panicked with pv after it
// started at start; sc is its score slot (nil: none).
func (l *Loop) panicked(ctx context.Context, a *agent, c *begun, rep *Report, start reading, sc *scoreCtx, pv any) {
	endN, dur := l.since(start)
	if sc != nil {
		c.q = sc.release()
	}
	if a != nil {
		rep.ID = callID(endN, c.version, c.key)
	}
	l.finish(ctx, a, c.id, c, rep, endN, dur, pv)
}

// configFor returns the config a call of a under ctx runs under, and the
// route of the primary when the call is a probe of it (see ProbePolicy);
// it notes in c whether the agent nests calls, and else the loop's
// failures so far, and the request's needs (see WithNeeds).
func (l *Loop) configFor(ctx context.Context, a *agent, c *begun, rep *Report) (cfg *Config, home string) {
	var needs *Needs // what the request needs of a route (WithNeeds), when a ladder declares limits
	if l.limited.Load() {
		needs = needsOf(ctx)
	}
	f := a.flags.Load()
	c.hurry = f&flagFellBack != 0
	if c.nests = f&flagNests != 0; !c.nests {
		c.seq = l.lately.seq.Load()
	}
	inst := a.cfg.Load()
	cfg, c.gen, c.key, rep.Version = &inst.Config, inst.gen, inst.key, inst.Version
	if inst.prev != nil {
		if rep.Arm = l.arm(inst); rep.Arm == ArmControl {
			cfg = inst.prev
		}
	}
	if inst.probeAt != 0 && !c.probe && (needs == nil || l.routes.of(c.id).fit(*inst.home, needs)) {
		if c.homeProbe = l.clock.Now().UnixNano() >= inst.probeAt && a.claimProbe(); c.homeProbe && l.claim(a, c) {
			home = *inst.home
		}
	}
	c.route = cfg.Route
	if m := l.dead.cur.Load(); m != nil && len(*m) > 0 && home == "" && !c.probe {
		cfg = l.skipDead(c, cfg, needs)
	}
	if (f&flagCool != 0 || needs != nil) && home == "" {
		cfg = l.offRoute(a, c, cfg, f, needs)
	}
	return cfg, home
}

// skipDead returns the config a call c runs under when cfg's route is
// dead loop-wide (another call, of any agent, found it withdrawn): cfg
// on the next live route of the agent's ladder, as a fallback made at
// once, which moves the agent too (see agentState.strike). The dead route
// gets no request. cfg itself otherwise.
func (l *Loop) skipDead(c *begun, cfg *Config, needs *Needs) *Config {
	lad := l.routes.of(c.id)
	if lad.empty() {
		return cfg
	}
	d, dead := l.dead.dead(lad.name(cfg.Route), l.clock.Now().UnixNano())
	if !dead {
		return cfg
	}
	alt, ok := l.fallBack(c, cfg, failure.ClassModelUnavailable, false, needs)
	if !ok {
		return cfg
	}
	cp := *cfg
	cp.Route = alt
	c.fellBack, c.fellClass, c.fellRoute, c.fellFrom, c.route, c.skipped = true, d.Class, alt, cfg.Route, alt, true
	return &cp
}

// finish completes the Report of a call that ran fn for dur and ended at
// endN (Unix nanoseconds), pv being its panic value if it panicked, and
// records the call.
func (l *Loop) finish(ctx context.Context, a *agent, agentID string, b *begun, rep *Report, endN int64, dur time.Duration, pv any) {
	c := &call{gen: b.gen, version: b.version, arm: b.arm, probe: b.probe, dur: dur, attempts: rep.Attempts, route: b.route,
		homeProbe: b.homeProbe, probeClass: b.probeClass, probeText: b.probeText,
		fellBack: b.fellBack, fellClass: b.fellClass, fellRoute: b.fellRoute, fellFrom: b.fellFrom, fellText: b.fellText, fellCluster: b.fellCluster, q: b.q,
		fitted: b.fitted, fellSilent: b.fellSilent, earlier: b.earlier, skipped: b.skipped}
	b.w.resume() // the waits began before fn (a load, a probe's claim)
	rep.Duration = dur
	if pv != nil {
		rep.Err = failure.Panic(pv)
	}
	rep.Success = rep.Err == nil
	rep.Ignored = !rep.Success && pv == nil && ctx.Err() != nil
	if rep.Ignored {
		rep.ID = 0 // not booked, so nothing to score: an untracked call's ID
	}
	if a == nil {
		rep.Version = rep.ConfigVersion
		if !rep.Success && !rep.Ignored {
			l.leave(ctx, agentID, rep.Err)
		}
		return
	}
	c.failed, c.ignored = !rep.Success, rep.Ignored
	c.end = time.Unix(0, endN)
	var text string
	if c.failed && !c.ignored {
		// Described before the agent's lock is taken, by the one path
		// that classifies every failure (see failure.Memo).
		f := l.describe(rep.Err, 0, b)
		text, c.text, c.class, c.cluster = f.Text, f.Text, f.Class, f.Cluster
		c.from, c.suspect = l.cause(a, b, rep.Err)
		l.record(ctx, a, c, b.w, f.Signature, rep)
		l.leave(ctx, agentID, rep.Err)
	} else {
		l.record(ctx, a, c, b.w, "", rep)
	}
	rep.Version = a.cfg.Load().Version // after a change the call made
	if b.homeProbe {
		a.set(flagProbing, false) // booked: another call may probe when due
	}
	if l.traces != nil {
		if c.ignored {
			text = failure.Text(rep.Err)
		}
		l.trace(agentID, c.version, c.end, rep, text)
	}
}

// untracked runs fn under agentID's config (the default config for an
// agent not in memory, or an invalid ID) without recording it: after
// Close (Report.LoopErr is ErrClosed), or for an invalid agent ID (it
// wraps ErrInvalidAgentID). The mistake goes to the log too (see
// mistakeLog.log). att is the call's attempt context, if it has one.
func (l *Loop) untracked(ctx context.Context, agentID string, fn func(context.Context, Config) error, att *callCtx) (Report, error) {
	rep := Report{LoopErr: ErrClosed}
	if !l.isClosed.Load() {
		rep.LoopErr = checkAgentID(agentID)
	}
	l.mistakes.log(l.log, l.seed, agentID, rep.LoopErr, l.clock.Now())
	cfg := l.defaultConfig
	if checkAgentID(agentID) == nil {
		if v, ok := l.agents.Load(agentID); ok {
			cfg = v.(*agent).cfg.Load().Config
		}
	}
	rep.ConfigVersion, rep.Version = cfg.Version, cfg.Version
	start := l.now()
	rep.Err, rep.BudgetExhausted = l.run(ctx, &cfg, fn, &rep.Attempts, nil, att)
	_, rep.Duration = l.since(start)
	rep.Success = rep.Err == nil
	return rep, rep.Err
}

// Execute is ExecuteWithImprovement for a function that returns a value:
// it returns the value of fn's last attempt, the Report and fn's error. A
// nil fn returns ErrNilFunc.
func Execute[T any](ctx context.Context, l *Loop, agentID string, fn func(context.Context, Config) (T, error)) (T, Report, error) {
	var out T
	if fn == nil {
		rep := Report{Err: ErrNilFunc, LoopErr: ErrNilFunc}
		return out, rep, ErrNilFunc
	}
	rep, err := l.ExecuteWithImprovement(ctx, agentID, func(ctx context.Context, c Config) error {
		v, err := fn(ctx, c)
		out = v
		return err
	})
	return out, rep, err
}

// admit decides whether a call of a may run fn: it returns probe when the
// call is the probe of a half-open circuit, or of a cause shared by open
// circuits (see circuits.go), and ok false when it must fail fast.
func (l *Loop) admit(a *agent) (probe, ok bool) {
	now := l.clock.Now().UnixNano()
	until := a.openUntil.Load()
	if now < until { // open, unless the clock stepped back (agentState.openUntil)
		a.mu.Lock()
		until = a.s.Tracker.waitUntil(until, now)
		a.mu.Unlock()
	}
	if !l.breaker.admits(now, until) && !l.circuits.turn(a, now) || !a.claimProbe() {
		return false, false
	}
	return true, true
}

// trace hands the call's trace to the writer.
func (l *Loop) trace(agentID string, version int, end time.Time, rep *Report, text string) {
	t := Trace{Time: end, AgentID: agentID, Version: version, Outcome: OutcomeSuccess, Duration: rep.Duration, Attempts: rep.Attempts, Err: text}
	switch {
	case rep.Ignored:
		t.Outcome = OutcomeIgnored
	case !rep.Success:
		t.Outcome = OutcomeFailure
	}
	if err := l.traces.add(&t); err != nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
	}
}

// arm picks the arm of the next call under in: a deterministic hash of the
// canary seed, the generation and the call's number, below canaryCut for
// the control arm.
func (l *Loop) arm(in *installed) Arm {
	if splitmix(l.rules.policy.CanarySeed+in.gen*0x9e3779b97f4a7c15+in.seq.Add(1)) < l.canaryCut {
		return ArmControl
	}
	return ArmChange
}

// record books a finished call on its agent, through the driver
// (Loop.step). w is the call's waits on the replication, once its load
// of a new agent or a probe's claim started them (zero: untouched; see
// waits); sig is a failure's signature.
func (l *Loop) record(ctx context.Context, a *agent, c *call, w waits, sig string, rep *Report) {
	in := input{kind: inCall, now: c.end.UnixNano(), c: c, sig: sig}
	if _, err := l.step(ctx, a, a.id, &in, rep, w); err != nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
	}
}

// applyCall applies the call of in to a: its telemetry, and the state
// machine's transition. a.mu is held.
func (a *agent) applyCall(l *Loop, in *input, eff *effects) {
	c := in.c
	if !a.used.Load() {
		a.used.Store(true)
	}
	a.dirty = true
	a.tel.observeLatency(c.dur, c.failed, c.ignored)
	a.s.record(c, []byte(in.sig), &l.rules, eff)
	if c.probe {
		a.set(flagProbing, false) // the probe is over; another call may probe
	}
	if !c.failed && !c.homeProbe && !c.fitted {
		// A call that needed the next route makes the next one hurry to
		// it; one answered on its own route ends that. A call that ran
		// off the agent's route for a reason of its own (c.fitted) does
		// neither.
		a.set(flagFellBack, c.fellBack && transient(c.fellClass))
		switch {
		case c.fellBack && c.fellSilent:
			// LiteLLM's cooldown, for a route that left a call without
			// an answer: the next calls skip it for ProbePolicy.ReturnEvery
			// rather than wait for it again (see Loop.cooled).
			a.s.route().coolUntil = c.end.UnixNano() + int64(l.rules.probes.ReturnEvery)
			a.set(flagCool, true)
		case !c.fellBack && a.has(flagCool):
			a.set(flagCool, false)
		}
	}
	eff.window = a.s.Tracker.Win.Width * windowSlots
	// The breaker's circuit opened by a failure, or closed by a probe (see
	// circuits.go).
	eff.until = a.s.CircuitOpenUntil
	eff.moved = eff.circuit && !a.held() && (eff.until != 0 && c.failed && c.cluster != 0 || eff.until == 0 && c.probe && !c.failed)
}

// circuitMoved indexes a's circuit, opened by c's failure until until
// (Unix ns), or, closed by c's successful probe, lets the agents open for
// the same cause probe.
func (l *Loop) circuitMoved(a *agent, c *call, until int64) {
	if until != 0 {
		l.circuits.opened(a, c.cluster, c.end.UnixNano(), until-c.end.UnixNano())
		return
	}
	for _, b := range l.circuits.recovered(a) {
		b.probeSoon(c.end.UnixNano())
	}
}

// leave hands the failure of a call of agentID, which returned err, to
// the attempt it is nested in: the nearest attempt context in ctx. A call
// nested in none, or in a call without an attempt context, leaves it in
// the loop's recent failures instead.
func (l *Loop) leave(ctx context.Context, agentID string, err error) {
	if p, _ := ctx.Value(callKey{}).(*callCtx); p != nil {
		p.note(agentID, err)
		return
	}
	l.lately.add(agentID, err)
}

// cause says where the failure of a's call c, which returned err, came
// from: from, the agent of a call nested in the call's last attempt that
// returned err (or an error err wraps); or, for a call without an
// attempt context, suspect when err is, or wraps, an error that a call
// of another agent returned while this one ran. A suspect agent's calls
// get an attempt context from then on, so that the next such failure is
// told apart for sure.
func (l *Loop) cause(a *agent, c *begun, err error) (from string, suspect bool) {
	if c.att != nil {
		return boundFrom(c.att.from(err)), false
	}
	if l.lately.seen(a.id, err, c.seq) {
		a.set(flagNests, true)
		return "", true
	}
	return "", false
}

// maxRecordDuration bounds a recorded call's duration: a longer one is
// booked as this long.
const maxRecordDuration = 24 * time.Hour

// Record books a call that ran outside the loop, as ExecuteWithImprovement
// books the calls it runs: an agent in another process or language
// reports what its call did (the admin package's outcome intake calls
// Record). r describes the call: Err (nil for a success; a failure is
// classified, scrubbed and cut like any, from its StatusCode or
// FailureClass method or its text), Duration (cut to 24 hours), Attempts
// (0 counts as 1), ConfigVersion (the version of the config the call ran
// under, as Config returned it; 0: the version in force) and Ignored (the
// caller gave up: counted as ignored, not as a failure) and Cost (the
// call's cost, booked per config version and route as AddCost's; 0, a
// negative or a NaN one: none). Its other fields are not read.
//
// The call counts exactly as a wrapped one: a failure may trigger the
// strategy and apply a change; a call under the version being verified
// may confirm it or roll it back; under MethodCanary, a call under the
// version before it counts for the control arm. A call that ran under an
// earlier version counts in the agent's stats but neither triggers a
// change nor judges the one in force, as a wrapped call that began before
// the change. The returned Report is r completed as ExecuteWithImprovement
// completes its own: ID (for Loop.Score), Version (the version in force
// after the booking), Arm, Improvement, Rollback, Confirmed,
// ImprovementTriggered and LoopErr.
// Nothing is booked, and Record returns an error wrapping
// ErrInvalidAgentID, ErrClosed or ErrUnknownVersion (a version the agent
// never had), when the agent ID is invalid, the loop is closed, or the
// version is unknown.
func (l *Loop) Record(ctx context.Context, agentID string, r Report) (Report, error) {
	if err := checkAgentID(agentID); err != nil {
		return r, err
	}
	if l.isClosed.Load() {
		return r, ErrClosed
	}
	a, err := l.agent(agentID)
	if a == nil {
		return r, err
	}
	r.LoopErr = err
	if r.ConfigVersion < 0 || r.ConfigVersion > l.maxVersion(a) {
		return r, fmt.Errorf("%w: agent %.64q ran version %d, which it never had", ErrUnknownVersion, agentID, r.ConfigVersion)
	}
	inst := a.cfg.Load()
	c := begun{id: agentID, gen: inst.gen, version: inst.Version, key: inst.key, route: inst.Route}
	switch {
	case r.ConfigVersion == 0 || r.ConfigVersion == inst.Version:
		if inst.prev != nil {
			c.arm = ArmChange
		}
	case inst.prev != nil && r.ConfigVersion == inst.prev.Version:
		c.arm, c.version, c.route = ArmControl, inst.prev.Version, inst.prev.Route
	default:
		// An earlier version: another generation than the one in force.
		c.gen, c.version, c.route, c.earlier = inst.gen-1, r.ConfigVersion, "", true
	}
	r.Duration = min(max(r.Duration, 0), maxRecordDuration)
	r.Attempts = max(r.Attempts, 1)
	r.ConfigVersion, r.Arm = c.version, c.arm
	r.Success = r.Err == nil
	if r.Success {
		r.Ignored = false
	}
	end := l.clock.Now()
	if r.Ignored {
		// finish counts a call as ignored when its context ended.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ctx = cctx
	} else {
		ctx = context.WithoutCancel(ctx)
	}
	if r.Cost > 0 && r.Cost <= maxRecordCost {
		c.q = quality{cost: r.Cost, costed: true}
	} else {
		r.Cost = 0
	}
	r.ID = callID(end.UnixNano(), c.version, c.key)
	l.finish(ctx, a, agentID, &c, &r, end.UnixNano(), r.Duration, nil)
	return r, nil
}

// maxVersion returns the highest config version a has had.
func (l *Loop) maxVersion(a *agent) int {
	a, err := l.lockAgent(a, a.id, 0)
	if a == nil || err != nil {
		return 0
	}
	defer a.mu.Unlock()
	return max(a.s.MaxVersion, a.s.Config.Version)
}
