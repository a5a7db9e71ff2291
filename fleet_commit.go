package selfimprove

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The Loop's side of an agent's shared state in the fleet (see
// fleet_loop.go): attaching a new agent to it, taking the fleet's state
// and the commits other replicas announce, committing this replica's
// decisions, and the lease that makes one strategy run fleet-wide.

// attach links a new agent to the fleet and takes the fleet's state
// of it, if any; the agent is not published yet. When the fleet cannot
// be reached, or the chain w (nil: a load of its own) has no time left,
// the agent runs on what the store had, and is compared with the fleet's
// state by the flusher.
func (fl *fleetLink) attach(a *agent, w *replica.Chain) {
	l := fl.l
	fa := &fleetAgent{rebase: a.s.Tracker.Total > 0}
	a.fl = fa
	if a.s.Quality != nil && len(a.s.Quality.Recs) > 0 {
		// The store's records may hold this replica's scores of the
		// generation, which the fleet's arms hold too (see bookArms).
		fa.arms.stored, fa.arms.storedGen = true, a.s.Gen
	}
	if m, ok := fl.unpark(a.id); ok {
		fa.resume(m, a.s.Gen) // evicted, and loaded again (fleet_pool.go)
	}
	fa.tally.follow(a.s.Gen) // a tally kept at the eviction is of the generation then
	base, _ := encodeShared(&a.s)
	fa.st.Took(base)
	if fl.Down() {
		// Backing off: the flusher finds when the fleet is back.
		fa.st.Resync()
		return
	}
	id, at := fleetWho(a)
	rev, val, res, _ := fl.Load(w, id, at)
	switch res {
	case replica.LoadSlow, replica.LoadDown:
		fa.st.Resync()
		return
	case replica.LoadBad:
		fa.st.Invalid(rev)
		fl.Kick()
		return
	}
	if rev == 0 {
		return
	}
	sh, err := decodeState(val, a.id)
	if take, kick := fa.st.Take(replica.Adopt{Rev: rev, Value: val}, err == nil); !take {
		fl.bad(a, err)
		if kick {
			fl.Kick()
		}
		return
	}
	a.s.adopt(&sh)
	a.s.threshold(l.clock.Now().UnixNano()) // the window's width follows the threshold at once
	fa.tally.follow(a.s.Gen)
	base, _ = encodeShared(&a.s)
	fa.st.Took(base)
	l.remember(fixesOf(sh.Changes, nil))
	l.props.note(a.id, a.s.Proposals)
}

// view puts the fleet's shared state of agent id, which this
// replica has not loaded, into st (read from the store: it keeps its call
// statistics), so that a getter answers on any replica what the fleet
// decided; with stats, the fleet's call statistics of the agent too
// (viewStats), in place of this replica's. It reports whether the
// fleet knows the agent: it has its shared state, or its statistics (an
// agent that has only run calls). Its operations ask the fleet under one
// fleet timeout, and not while backing off; an unreachable fleet or an
// invalid state leaves st as it was.
func (fl *fleetLink) view(id string, st *agentState, stats bool) bool {
	l := fl.l
	if fl.Down() {
		return false
	}
	w := fl.Chain(nil)
	rev, val, res, _ := fl.View(w, id)
	if res == replica.LoadDown || res == replica.LoadSlow {
		return false
	}
	known := false
	if sh, err := decodeState(val, id); err == nil && rev != 0 {
		// An invalid state is reported, and replaced, by a replica that
		// runs the agent.
		if st.AgentID == "" {
			*st = newState(id, l.defaultConfig.clone())
		}
		st.adopt(&sh)
		known = true
	}
	if stats && fl.viewStats(id, st, w) {
		known = true
	}
	if known {
		st.threshold(l.clock.Now().UnixNano())
	}
	return known
}

// fleetWho returns what the transport reports a's errors by: its ID, and
// when they were last logged (nil: the transport's own time).
func fleetWho(a *agent) (string, *atomic.Int64) {
	switch {
	case a == nil:
		return "", nil
	case a.fl == nil:
		return a.id, nil
	}
	return a.id, &a.fl.badAt
}

// refresh loads a's state from the fleet and takes it if it is newer
// than a's. It reports whether it could ask.
func (fl *fleetLink) refresh(a *agent) bool { return fl.refreshWait(a, nil) }

// refreshWait is refresh as an operation of the chain w (nil: a
// chain of its own). When w's time is spent it does not ask, and the
// flusher compares a with the fleet's state later.
func (fl *fleetLink) refreshWait(a *agent, w *replica.Chain) bool {
	a.mu.Lock()
	since := a.fl.st.Rev // an answer older than since says the fleet lost the state; one older than the copy's is late
	a.mu.Unlock()
	id, at := fleetWho(a)
	rev, val, res, _ := fl.Load(fl.Chain(w), id, at)
	in := &fleetInput{kind: fleetLoaded, since: since, rev: rev, val: val, res: res, why: errTakenOver}
	fl.give(a, in, nil)
	return in.asked
}

// next carries out n, what a's replication asks after an input, in
// its order (a Check is done under the input's lock: outcome): take
// a state (a take-back, for why), refresh (as an operation of the chain
// w), ask for a flush. It reports whether a refresh it made could ask
// the fleet (false when it made none).
func (fl *fleetLink) next(a *agent, n replica.Next, why error, w *replica.Chain) (asked bool) {
	if n.Adopt != nil {
		fl.adopt(a, *n.Adopt, why)
	}
	if n.Refresh {
		asked = fl.refreshWait(a, w)
	}
	if n.Kick {
		fl.Kick()
	}
	return asked
}

// adopt makes the shared state ad.Value, at revision ad.Rev, a's,
// when its replication takes it (replica.State.Take): a newer state, or a
// take-back (ad.Force) when no state of the fleet's was taken since its
// commit began. a keeps its call statistics; the decisions not committed
// yet are taken back for why (fleet_batch.go). An input of the agent's
// (fleetAdopt).
func (fl *fleetLink) adopt(a *agent, ad replica.Adopt, why error) {
	sh, err := decodeState(ad.Value, a.id)
	if err != nil {
		fl.bad(a, err)
	}
	fl.give(a, &fleetInput{kind: fleetAdopt, ad: ad, sh: &sh, valid: err == nil, why: why}, nil)
}

// notified takes a commit another replica announced: an input of the
// driver's (fleetNotified), which refreshes a when the revision is newer.
func (fl *fleetLink) notified(id string, rev uint64) {
	l := fl.l
	v, ok := l.agents.Load(id)
	if !ok || l.isClosed.Load() {
		return
	}
	a := v.(*agent)
	if a.fl == nil {
		return
	}
	fl.give(a, &fleetInput{kind: fleetNotified, rev: rev}, nil)
}

// commit commits a's shared state, c.Value, if it changed (c, from
// replica.State.Begin, under the lock its state was taken under), with
// the events evs of the decisions that changed it. When another replica
// committed first, a takes its state and the error wraps
// ErrFleetConflict; when the fleet cannot be reached, a goes back to the
// fleet's last state it knew and the error wraps ErrFleetUnavailable. In
// both cases the decisions did not happen.
// It waits on the fleet as part of the chain w (nil: a chain of its own).
func (fl *fleetLink) commit(a *agent, c replica.Commit, evs []queued, w *replica.Chain) error {
	if !c.Changed() {
		return nil // the fleet has it, unless it lost it or holds an invalid one
	}
	return fl.swap(a, c, evs, w)
}

// swap sends the commit c of a's shared state, whether it changed or
// not, and carries out its outcome; see commit. The decision's
// events go to the fleet's log with the next flush, off the caller's
// path. The caller holds a's save lock: one commit of a is in flight.
func (fl *fleetLink) swap(a *agent, c replica.Commit, evs []queued, w *replica.Chain) error {
	w = fl.Chain(w)
	id, at := fleetWho(a)
	out, nrev, err := fl.Commit(w, id, c.Rev, c.Value, func() {
		fl.give(a, &fleetInput{kind: fleetSending}, nil)
	}, at)
	var keep any
	if out == replica.Unreachable && len(evs) > 0 {
		keep = evs // without events, nothing would go unrecorded
	}
	return fl.outcome(a, c, out, nrev, keep, err, w, evs...)
}

// outcome gives commit c's outcome out (at nrev when it landed; keep:
// the events of a commit that may have landed) to a's state machine, an
// input of the driver's (fleetCommitted), which carries out what it
// asks: a conflict's refresh, then its resolution; a take-back for err.
// The events evs of a commit that landed go to the fleet's log before
// any refresh. It returns err.
func (fl *fleetLink) outcome(a *agent, c replica.Commit, out replica.Outcome, nrev uint64, keep any, err error, w *replica.Chain, evs ...queued) error {
	fl.give(a, &fleetInput{kind: fleetCommitted, c: c, out: out, rev: nrev, keep: keep, why: err, evs: evs}, w)
	return err
}

// lease takes the agent's lease for the strategy run an, and checks
// that no other replica acted on the trigger meanwhile. It reports
// whether this replica runs the strategy.
// Its operations are of the chain w.
func (fl *fleetLink) lease(a *agent, an *Analysis, w *replica.Chain) bool {
	l := fl.l
	fa := a.fl
	now := l.clock.Now().UnixNano()
	a.mu.Lock()
	busy := now < fa.leaseBusy || fa.releasing
	cooldown := a.s.CooldownUntil
	a.mu.Unlock()
	if busy || fl.Down() {
		return false // taken, or backing off since the fleet's last failure
	}
	ttl := l.strategyTimeout + 4*fl.Timeout
	// The lease, the reload and the commit of the decision are one
	// chain: the call that crossed the threshold waits on the fleet for
	// one timeout at most.
	id, at := fleetWho(a)
	ok, err := fl.Lease(w, id, ttl, at)
	if err != nil {
		return false
	}
	if !ok {
		fl.give(a, &fleetInput{kind: fleetLeaseBusy, until: now + int64(ttl)}, nil)
		return false
	}
	if !fl.refreshWait(a, w) {
		fl.release(a, w)
		return false
	}
	in := &fleetInput{kind: fleetLeased, version: an.Config.Version, cooldown: cooldown}
	if fl.give(a, in, nil); !in.ok { // another replica acted meanwhile
		fl.release(a, w)
		return false
	}
	return true
}

// release gives the agent's lease back, as an operation of the
// chain w; not when the fleet is down (it expires). When w's time is
// spent, the flusher gives it back, off the caller's path
// (releaseLater).
func (fl *fleetLink) release(a *agent, w *replica.Chain) {
	if id, at := fleetWho(a); !fl.Release(w, id, at) {
		fl.releaseLater(a) // not down: the flusher gives it back
	}
}

// releaseLater asks the flusher to give a's lease back: the call
// that held it had spent its fleet time.
func (fl *fleetLink) releaseLater(a *agent) {
	fl.rel.Push(a) // beyond maxFleetReleases, the lease expires
	fl.Kick()
}

// maxFleetReleases bounds the leases waiting for the flusher to give
// them back; beyond it they expire.
const maxFleetReleases = 1024

// releases gives back the leases releaseLater queued, all
// within one fleet timeout (best effort: a lease not given back expires).
// A lease of an agent whose strategy runs again here is left to that
// run, which holds it; while one is given back, the agent takes no lease
// (lease). FlushMu is held.
func (fl *fleetLink) releases() {
	rel := fl.rel.Take()
	if len(rel) == 0 || fl.Down() {
		return
	}
	ctx, cancel := fl.Ctx()
	defer cancel()
	for _, a := range rel {
		in := &fleetInput{kind: fleetReleasing, on: true}
		if fl.give(a, in, nil); in.ok {
			continue // its strategy runs again: that run holds the lease
		}
		_, at := fleetWho(a)
		err := fl.ReleaseIn(ctx, a.id, at)
		fl.give(a, &fleetInput{kind: fleetReleasing}, nil)
		if err != nil {
			return
		}
	}
}

// The fleet's answers as inputs of the driver (Loop.step, inFleet): a
// commit's outcome, its resolution after a conflict, a load, a
// notification, a state to take; and the replication's bookkeeping (see
// bookFleetLocked). Each is given to the agent's
// replication (replica.State) under the agent's lock, and a state taken
// changes the agent's own state in the same transition; what the answer
// asks for after the lock (the replication's Next, the events of a
// decision whose lost answer landed) is carried out by the driver
// (fleetLink.carry), and an answer that comes of it (a state taken, a
// conflict resolved) is an input of its own.

// fleetAnswer says which answer of the fleet a fleetInput is.
type fleetAnswer uint8

const (
	fleetCommitted fleetAnswer = iota + 1 // a commit's outcome: c, out, rev (the new one), keep, evs, why
	fleetResolved                         // a conflict's resolution: c, asked (by the conflict's refresh), why
	fleetLoaded                           // a load: since, rev, val, res, why (of a take-back)
	fleetNotified                         // another replica's commit announced: rev
	fleetAdopt                            // a state to take: ad, sh (valid: it decoded), why (of a take-back)

	// The replication's bookkeeping, inputs too (bookFleetLocked): what the
	// flusher, a commit and a lease change of the agent's fleetAgent.
	fleetSending   // a commit goes to the fleet now
	fleetTake      // a flush takes the agent's delta: poll; sets item and ok (one to send)
	fleetAnswered  // the fleet answered the delta item (again: to be sent again as it was)
	fleetPoolRev   // the revision rev of a pool: sets lag, and ok when the fleet's is newer
	fleetResync    // compare the copy with the fleet's state at the next flush
	fleetLeaseBusy // another replica holds the lease until until
	fleetLeased    // the lease taken and the copy refreshed: version, cooldown (those seen before); sets ok (no one acted)
	fleetReleasing // the flusher gives the lease back (on) or gave it; sets ok when a strategy runs (on)
	fleetStats     // a flush's statistics of the agent, at at: sets ok when due, and sh
)

// fleetInput is an answer of the fleet's, given to the agent's state
// machine by the driver.
type fleetInput struct {
	kind fleetAnswer
	why  error // the error of the commit, or the reason of a take-back

	c    replica.Commit
	out  replica.Outcome
	keep any      // the events of a commit whose answer was lost
	evs  []queued // a commit's events, logged by the fleet once it landed

	since, rev uint64
	val        []byte
	res        replica.Load

	ad    replica.Adopt
	sh    *agentState
	valid bool

	// asked: for fleetLoaded, set by the transition, whether the load
	// could ask the fleet; for fleetResolved, whether the conflict's
	// refresh could.
	asked bool

	// The bookkeeping inputs' values (fleetAnswer's comments), and ok,
	// lag, item and sh, what their transitions found.
	poll, on, again, ok bool
	item                fleetItem
	lag, until, at      int64
	cooldown            int64
	version             int
	// next is what the transition found the answer asks, for the driver
	// to carry out after the lock.
	next fleetNext
}

// fleetNext is what an answer of the fleet's asks the driver to carry
// out after the lock (fleetLink.carry), in this order.
type fleetNext struct {
	props  []Proposal // the proposals of a state taken, for the index (taken)
	taken  bool
	landed []queued // the events of a decision whose lost answer landed after all
	logged []queued // a landed commit's events, for the fleet's log
	lost   bool     // the fleet lost the agent's state: it is written again
	kick   bool     // a flush now
	next   replica.Next
	why    error       // the reason of a take-back next asks
	then   *fleetInput // a conflict's resolution, once next is carried out
	notice bool        // a newer revision announced: refresh
}

// give gives the fleet's answer in to a's state machine (Loop.step) and
// carries out what it asks; its waits on the fleet are of the chain w.
// A state taken, and the delta a flush takes, are given to an agent
// still live only (lockLive); the other inputs to the agent as it is.
func (fl *fleetLink) give(a *agent, in *fleetInput, w *replica.Chain) {
	lock := lockThis
	if in.kind == fleetAdopt || in.kind == fleetTake {
		lock = lockLive
	}
	var rep Report
	fl.l.step(context.Background(), a, a.id, &input{kind: inFleet, lock: lock, more: &inputMore{fleet: in}}, &rep, waits{w})
}

// applyFleet applies the fleet's answer in: to a's replication, and,
// for a state taken, to its state. a.mu is held and a is settled.
func (a *agent) applyFleet(l *Loop, in *fleetInput, eff *effects) {
	st := &a.fl.st
	fx := &in.next
	fx.why = in.why
	switch in.kind {
	case fleetCommitted:
		fx.next = st.Committed(in.c, in.out, in.rev, in.keep)
		if fx.next.Check {
			// A state of the fleet's taken while the commit was in flight
			// may hold the decision whose answer was lost: checked before
			// the lock goes, so that no newer state is taken first.
			fx.landed = a.settleOrphansLocked()
			fx.next.Check = false
		}
		switch in.out {
		case replica.Landed:
			fx.logged = in.evs
		case replica.Conflict:
			fx.then = &fleetInput{kind: fleetResolved, c: in.c, why: in.why}
		}
	case fleetResolved:
		fx.next = st.Resolved(in.c, in.asked)
	case fleetLoaded:
		fx.next, in.asked = st.Loaded(in.since, in.rev, in.val, in.res)
		fx.lost = fx.next.Lost
	case fleetNotified:
		fx.notice = st.Notified(in.rev)
	case fleetAdopt:
		a.adoptLocked(l, in, eff, fx)
	default:
		a.bookFleetLocked(l, in)
	}
}

// bookFleetLocked applies one of the replication's bookkeeping inputs in
// (fleetSending to fleetStats): what a flush, a commit and a lease change
// of a's fleetAgent, found in in.ok, in.lag, in.item and in.sh. a.mu
// is held, and a is settled unless evicted.
func (a *agent) bookFleetLocked(l *Loop, in *fleetInput) {
	fa := a.fl
	switch in.kind {
	case fleetSending:
		fa.st.Sending()
	case fleetTake:
		in.item, in.ok = a.takeDeltaLocked(l.fleet.Name, in.poll, &l.fleet.batches)
	case fleetAnswered:
		// Unreachable: the delta goes again as it was. Refused, or
		// answered: the next is a new one. Failed (why): no pool comes,
		// and the delta is in flight no longer.
		fa.deltas.Answered(in.item.d, in.again)
		fa.pendingPrior = in.again && in.item.prior
		fa.flying = fa.flying && in.why == nil
	case fleetPoolRev:
		in.lag, in.ok = fa.behind(in.rev)
	case fleetResync:
		fa.st.Resync()
	case fleetLeaseBusy:
		fa.leaseBusy = in.until
	case fleetLeased:
		in.ok = a.s.Config.Version == in.version && a.s.Verifying == nil && a.s.CooldownUntil == in.cooldown
	case fleetReleasing:
		in.ok = in.on && a.s.analyzing
		fa.releasing = in.on && !in.ok
	case fleetStats:
		in.ok, in.sh = a.statsDueLocked(in.at)
	}
}

// statsDueLocked reports whether a's statistics are due in a flush at
// now (see fleetLink.stats), and returns them when they are, noting
// that they are sent. a.mu is held.
func (a *agent) statsDueLocked(now int64) (bool, *agentState) {
	fa := a.fl
	mark := a.s.statsMark()
	due := fa.statsOwed && !a.evicted && mark != fa.statsMark &&
		(fa.statsAt == 0 || now-fa.statsAt >= int64(fleetStatsEvery) || now < fa.statsAt)
	if !due {
		return false, nil
	}
	fa.statsAt, fa.statsMark, fa.statsOwed = now, mark, false
	st := a.s.statsPart()
	return true, &st
}

// adoptLocked takes the fleet's state in.sh, when the replication takes
// it (replica.State.Take), into a's: the decisions not committed yet are
// taken back for in.why; a keeps its call statistics. a.mu is held.
func (a *agent) adoptLocked(l *Loop, in *fleetInput, eff *effects, fx *fleetNext) {
	fa := a.fl
	take, kick := fa.st.Take(in.ad, in.valid)
	if !take {
		fx.kick = kick
		return
	}
	known := make(map[string]bool, len(a.s.Changes))
	for _, ch := range a.s.Changes {
		known[ch.ID] = true
	}
	learned := decidedIn(fa.st.Base, a.id)
	a.takenBackLocked(in.why)
	a.s.adopt(in.sh)
	a.s.threshold(l.clock.Now().UnixNano()) // the window's width follows the threshold at once
	base, _ := encodeShared(&a.s)
	due := fa.st.Took(base)
	if fa.tally.gen != a.s.Gen {
		fa.tally.moveTo(a.s.Gen) // its calls so far count in the fleet's totals
	}
	a.dirty = true
	eff.publish, eff.circuit = true, true
	eff.learned = append(eff.learned, fixesOf(a.s.Changes, learned)...)
	fx.taken, fx.props = true, a.s.snapshot().Proposals
	if len(due) > 0 {
		chs := a.s.Changes
		if a.s.Verifying != nil { // an apply whose answer was lost, on which others committed since
			chs = append(slices.Clip(chs), a.s.verifying())
		}
		for i := range due {
			fx.landed = append(fx.landed, a.landedLocked(&due[i], in.ad.Value, chs, known)...)
		}
	}
}

// carry carries out what an answer of the fleet's asked (fx), after a's
// lock: the proposals of a state taken listed, the events of a decision
// whose lost answer landed recorded, a landed commit's events queued for
// the fleet's log, then the replication's Next (fleetLink.next) and the
// answer that comes of it. Its waits on the fleet are of the chain w.
func (fl *fleetLink) carry(_ context.Context, a *agent, fx *fleetNext, w *replica.Chain) {
	l := fl.l
	if fx.taken {
		l.props.note(a.id, fx.props)
	}
	fl.orphanLanded(a, fx.landed)
	fl.logEvents(fx.logged)
	if fx.lost {
		l.log.Warn("selfimprove: the fleet lost the agent's state; writing it again", "agent", a.id)
	}
	if fx.kick {
		fl.Kick()
	}
	asked := fl.next(a, fx.next, fx.why, w)
	if fx.then != nil {
		fx.then.asked = asked
		fl.give(a, fx.then, w)
	}
	if fx.notice {
		fl.refresh(a)
	}
}
