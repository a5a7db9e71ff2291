package selfimprove

import (
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
	fa := &fleetAgent{}
	a.fl = fa
	fa.tally.gen = a.s.Gen
	if a.s.Quality != nil && len(a.s.Quality.Recs) > 0 {
		// The store's records may hold this replica's scores of the
		// generation, which the fleet's arms hold too (see bookArms).
		fa.arms.stored, fa.arms.storedGen = true, a.s.Gen
	}
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
	fa.tally.gen = a.s.Gen
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
	fa := a.fl
	w = fl.Chain(w)
	id, at := fleetWho(a)
	out, nrev, err := fl.Commit(w, id, c.Rev, c.Value, func() {
		a.mu.Lock()
		fa.st.Sending()
		a.mu.Unlock()
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
		a.mu.Lock()
		fa.leaseBusy = now + int64(ttl)
		a.mu.Unlock()
		return false
	}
	if !fl.refreshWait(a, w) {
		fl.release(a, w)
		return false
	}
	a.mu.Lock()
	a.settleFleetLocked(l)
	acted := a.s.Config.Version != an.Config.Version || a.s.Verifying != nil || a.s.CooldownUntil != cooldown
	a.mu.Unlock()
	if acted {
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
		a.mu.Lock()
		run := a.s.analyzing
		a.fl.releasing = !run
		a.mu.Unlock()
		if run {
			continue
		}
		_, at := fleetWho(a)
		err := fl.ReleaseIn(ctx, a.id, at)
		a.mu.Lock()
		a.fl.releasing = false
		a.mu.Unlock()
		if err != nil {
			return
		}
	}
}
