package selfimprove

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// The Loop's side of an agent's shared state in the fleet (see
// fleet_loop.go): attaching a new agent to it, taking the fleet's state
// and the commits other replicas announce, committing this replica's
// decisions, and the lease that makes one strategy run fleet-wide.

// fleetAttach links a new agent to the fleet and takes the fleet's state
// of it, if any; the agent is not published yet. When the fleet cannot
// be reached, or the chain w (nil: a load of its own) has no time left,
// the agent runs on what the store had, and is compared with the fleet's
// state by the flusher.
func (l *Loop) fleetAttach(a *agent, w *fleetWait) {
	fa := &fleetAgent{}
	a.fl = fa
	fa.tally.gen = a.s.Gen
	if a.s.Quality != nil && len(a.s.Quality.Recs) > 0 {
		// The store's records may hold this replica's scores of the
		// generation, which the fleet's arms hold too (see bookArms).
		fa.arms.stored, fa.arms.storedGen = true, a.s.Gen
	}
	fa.base, _ = encodeShared(&a.s)
	if l.fleet.down.Load() {
		// Backing off: the flusher finds when the fleet is back.
		fa.resync.Store(true)
		return
	}
	ctx, done, ok := l.fleet.op(w)
	if !ok {
		fa.resync.Store(true)
		return
	}
	rev, val, err := l.fleet.f.Load(ctx, a.id)
	err = cut(ctx, err)
	done()
	if err != nil {
		l.fleetErr(a, err)
		if errors.Is(err, ErrFleetUnavailable) {
			fa.resync.Store(true)
		} else {
			l.fleetInvalid(a, rev)
		}
		return
	}
	l.fleetUp()
	if rev == 0 {
		return
	}
	sh, err := decodeState(val, a.id)
	if err != nil {
		l.fleetBad(a, err)
		l.fleetInvalid(a, rev)
		return
	}
	a.s.adopt(&sh)
	a.s.threshold(l.clock.Now().UnixNano()) // the window's width follows the threshold at once
	fa.rev, fa.tally.gen = rev, a.s.Gen
	fa.base, _ = encodeShared(&a.s)
	l.remember(fixesOf(sh.Changes, nil))
	l.props.note(a.id, a.s.Proposals)
}

// fleetInvalid notes that the fleet holds an invalid state of a, at
// revision rev: a keeps its own, and writes it over the fleet's at the
// next flush (fleetRewrite) or decision, whichever comes first. Its base
// stays the shared state it last had: a decision whose commit fails is
// taken back to it.
func (l *Loop) fleetInvalid(a *agent, rev uint64) {
	fa := a.fl
	fa.rev = rev
	fa.rewrite.Store(true)
	select {
	case l.fleet.kick <- struct{}{}:
	default:
	}
}

// fleetView puts the fleet's shared state of agent id, which this
// replica has not loaded, into st (read from the store: it keeps its call
// statistics), so that a getter answers on any replica what the fleet
// decided; with stats, the fleet's call statistics of the agent too
// (fleetViewStats), in place of this replica's. It reports whether the
// fleet knows the agent: it has its shared state, or its statistics (an
// agent that has only run calls). Its operations ask the fleet under one
// fleet timeout, and not while backing off; an unreachable fleet or an
// invalid state leaves st as it was.
func (l *Loop) fleetView(id string, st *agentState, stats bool) bool {
	if l.fleet.down.Load() {
		return false
	}
	w := l.fleet.wait(nil)
	ctx, done, ok := l.fleet.op(w)
	if !ok {
		return false
	}
	rev, val, err := l.fleet.f.Load(ctx, id)
	done()
	if err != nil {
		l.fleetErr(nil, err)
		if errors.Is(err, ErrFleetUnavailable) {
			return false
		}
	} else {
		l.fleetUp()
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
	if stats && l.fleetViewStats(id, st, w) {
		known = true
	}
	if known {
		st.threshold(l.clock.Now().UnixNano())
	}
	return known
}

// fixesOf returns the outcomes of the decided changes in chs whose IDs
// known does not hold, for the failure memory.
func fixesOf(chs []Change, known map[string]bool) []fixNote {
	var out []fixNote
	for i := range chs {
		if ch := &chs[i]; !known[ch.ID] {
			if f, ok := fixNoteOf(ch, FixOutcome(ch.State), ch.DecidedAt); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

// fleetRefresh loads a's state from the fleet and takes it if it is newer
// than a's. It reports whether it could ask.
func (l *Loop) fleetRefresh(a *agent) bool { return l.fleetRefreshWait(a, nil) }

// fleetRefreshWait is fleetRefresh as an operation of the chain w (nil: a
// chain of its own). When w's time is spent it does not ask, and the
// flusher compares a with the fleet's state later.
func (l *Loop) fleetRefreshWait(a *agent, w *fleetWait) bool {
	ctx, done, ok := l.fleet.op(l.fleet.wait(w))
	if !ok {
		a.fl.resync.Store(true)
		return false
	}
	defer done()
	return l.fleetRefreshCtx(ctx, a)
}

// fleetRefreshCtx is fleetRefresh under ctx.
func (l *Loop) fleetRefreshCtx(ctx context.Context, a *agent) bool {
	rev, val, err := l.fleet.f.Load(ctx, a.id)
	err = cut(ctx, err)
	fa := a.fl
	if err != nil {
		l.fleetErr(a, err)
		if errors.Is(err, ErrFleetUnavailable) {
			if errors.Is(err, errFleetSlow) {
				fa.resync.Store(true) // not down: the flusher compares it with the fleet
			}
			return false
		}
		fa.resync.Store(false)
		a.mu.Lock()
		l.fleetInvalid(a, rev)
		a.mu.Unlock()
		return true
	}
	l.fleetUp()
	fa.resync.Store(false)
	a.mu.Lock()
	a.settleFleetLocked(l)
	lost := rev < fa.rev
	if lost {
		// The fleet lost the agent's state (a Redis restarted without
		// persistence): this replica's copy goes back at once.
		fa.rev = rev
		fa.rewrite.Store(true)
	}
	a.mu.Unlock()
	if lost {
		l.log.Warn("selfimprove: the fleet lost the agent's state; writing it again", "agent", a.id)
	}
	if rev > 0 {
		l.fleetAdopt(a, rev, val, false, errTakenOver)
	}
	return true
}

// fleetAdopt makes the shared state val, at revision rev, a's: when it is
// newer than a's, or with force (a take-back) when it is not older. a
// keeps its call statistics; the
// decisions not committed yet are taken back for why (fleet_batch.go).
func (l *Loop) fleetAdopt(a *agent, rev uint64, val []byte, force bool, why error) {
	sh, err := decodeState(val, a.id)
	fa := a.fl
	if err != nil {
		l.fleetBad(a, err)
		a.mu.Lock()
		if !a.evicted && rev > fa.rev {
			l.fleetInvalid(a, rev)
		}
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.settleFleetLocked(l)
	if a.evicted || (rev <= fa.rev && !force) || rev < fa.rev {
		// Not newer; or, taking decisions back, a state newer than the
		// one they were made on has been taken since (and took them back).
		a.mu.Unlock()
		return
	}
	if !force {
		// A valid state, newer than a's: the fleet holds one again,
		// and a's is not to be written over it.
		fa.rewrite.Store(false)
	}
	known := make(map[string]bool, len(a.s.Changes))
	for _, ch := range a.s.Changes {
		known[ch.ID] = true
	}
	a.takenBackLocked(why)
	a.s.adopt(&sh)
	a.s.threshold(l.clock.Now().UnixNano()) // the window's width follows the threshold at once
	fa.rev = rev
	fa.base, _ = encodeShared(&a.s)
	if fa.tally.gen != a.s.Gen {
		fa.tally = fleetTally{gen: a.s.Gen}
	}
	a.dirty = true
	a.publishLocked(l.canaryCut > 0)
	a.mirrorLocked()
	fixes := fixesOf(a.s.Changes, known)
	props := a.s.snapshot().Proposals
	landed := a.landedLocked(rev, val, known)
	a.mu.Unlock()
	l.remember(fixes)
	l.props.note(a.id, props)
	l.orphanLanded(a, landed)
}

// fleetNotified takes a commit another replica announced.
func (l *Loop) fleetNotified(id string, rev uint64) {
	v, ok := l.agents.Load(id)
	if !ok || l.isClosed.Load() {
		return
	}
	a := v.(*agent)
	fa := a.fl
	if fa == nil {
		return
	}
	for {
		n := fa.notified.Load()
		if n >= rev || fa.notified.CompareAndSwap(n, rev) {
			break
		}
	}
	if fa.committing.Load() {
		return // the committer looks at notified when it is done
	}
	a.mu.Lock()
	a.settleFleetLocked(l)
	cur := fa.rev
	a.mu.Unlock()
	if rev > cur {
		l.fleetRefresh(a)
	}
}

// fleetCommit commits a's shared state, as in snap, if it changed, with
// the events evs of the decisions that changed it. When another replica
// committed first, a takes its state and the error wraps
// ErrFleetConflict; when the fleet cannot be reached, a goes back to the
// fleet's last state it knew and the error wraps ErrFleetUnavailable. In
// both cases the decisions did not happen.
// It waits on the fleet as part of the chain w (nil: a chain of its own).
// rev and base are a's revision and base when snap was taken, under the
// same lock: a state taken from the fleet since (a flush's refresh) must
// not carry snap, made on the state before it, to its revision.
func (l *Loop) fleetCommit(a *agent, snap *agentState, rev uint64, base []byte, evs []queued, w *fleetWait) error {
	value, err := encodeShared(snap)
	if err != nil {
		return err
	}
	if bytes.Equal(value, base) && !a.fl.rewrite.Load() {
		return nil // the fleet has it, unless it lost it or holds an invalid one
	}
	return l.fleetSwap(a, rev, base, value, evs, w)
}

// fleetSwap commits value as a's shared state if the fleet is still at
// rev, whose state was base; see fleetCommit. The decision's events go to
// the fleet's log with the next flush, off the caller's path.
func (l *Loop) fleetSwap(a *agent, rev uint64, base, value []byte, evs []queued, w *fleetWait) error {
	fa, fl := a.fl, l.fleet
	w = fl.wait(w)
	if fl.down.Load() {
		// Backing off until the flusher finds the fleet again: the
		// decision is taken back at once.
		err := fmt.Errorf("%w: backing off since the last failure", ErrFleetUnavailable)
		l.takeBack(a, rev, base, err)
		return err
	}
	ctx, done, ok := fl.op(w)
	if !ok {
		l.takeBack(a, rev, base, errFleetSlow) // never sent: it cannot land
		return errFleetSlow
	}
	fa.committing.Store(true)
	start := l.now()
	nrev, err := fl.f.Commit(ctx, a.id, rev, value)
	err = cut(ctx, err)
	_, took := l.since(start)
	done()
	fa.committing.Store(false)
	l.m.fleetCommits.Add(1)
	l.m.fleetCommitNS.Add(int64(took))
	for m := l.m.fleetCommitMax.Load(); int64(took) > m && !l.m.fleetCommitMax.CompareAndSwap(m, int64(took)); m = l.m.fleetCommitMax.Load() {
	}
	switch {
	case err == nil:
		l.fleetUp()
		a.mu.Lock()
		a.settleFleetLocked(l)
		if fa.rev == rev {
			fa.rev, fa.base = nrev, value
			fa.rewrite.Store(false) // written over the fleet's
		}
		a.mu.Unlock()
		l.fleetLog(evs)
		if fa.notified.Load() > nrev {
			l.fleetRefreshWait(a, w)
		}
		return nil
	case errors.Is(err, ErrFleetConflict):
		l.fleetUp()
		l.m.fleetConflicts.Add(1)
		err = fmt.Errorf("selfimprove: another replica decided first: %w", err)
		if !l.fleetRefreshWait(a, w) || fa.rewrite.Load() {
			// The winner's state is taken later (the flusher), or the
			// fleet's is invalid or lost (a's is written over it): the
			// decision is taken back now.
			l.takeBack(a, rev, base, err)
		}
		return err
	default:
		l.fleetErr(a, err)
		if errors.Is(err, ErrFleetUnavailable) {
			l.keepOrphan(a, rev, value, evs)
			err = fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
		} else {
			err = fmt.Errorf("%w: %w", errFleetRefused, err)
		}
		l.takeBack(a, rev, base, err)
		return err
	}
}

// takeBack puts a's shared state back to base, the fleet's state at rev
// (nil: none known), taking back the decisions made since for why. When
// the fleet lost a's state or holds an invalid one, base is the shared
// state a last had, to be written over the fleet's at the revision a
// found there.
func (l *Loop) takeBack(a *agent, rev uint64, base []byte, why error) {
	if base == nil {
		return
	}
	if a.fl.rewrite.Load() {
		a.mu.Lock()
		rev = a.fl.rev
		a.mu.Unlock()
	}
	l.fleetAdopt(a, rev, base, true, why)
}

// fleetLease takes the agent's lease for the strategy run an, and checks
// that no other replica acted on the trigger meanwhile. It reports
// whether this replica runs the strategy.
// Its operations are of the chain w.
func (l *Loop) fleetLease(a *agent, an *Analysis, w *fleetWait) bool {
	fl, fa := l.fleet, a.fl
	now := l.clock.Now().UnixNano()
	a.mu.Lock()
	busy := now < fa.leaseBusy || fa.releasing
	cooldown := a.s.CooldownUntil
	a.mu.Unlock()
	if busy || fl.down.Load() {
		return false // taken, or backing off since the fleet's last failure
	}
	ttl := l.strategyTimeout + 4*fl.timeout
	// The lease, the reload and the commit of the decision are one
	// chain: the call that crossed the threshold waits on the fleet for
	// one timeout at most.
	ctx, done, ok := fl.op(w)
	if !ok {
		return false
	}
	ok, err := fl.f.Lease(ctx, a.id, fl.replica, ttl)
	err = cut(ctx, err)
	done()
	if err != nil {
		l.m.fleetLeaseErrs.Add(1)
		l.fleetErr(a, err)
		return false
	}
	l.fleetUp()
	if ok {
		l.m.fleetLeases.Add(1)
	} else {
		l.m.fleetBusy.Add(1)
		a.mu.Lock()
		fa.leaseBusy = now + int64(ttl)
		a.mu.Unlock()
		return false
	}
	if !l.fleetRefreshWait(a, w) {
		l.fleetRelease(a, w)
		return false
	}
	a.mu.Lock()
	a.settleFleetLocked(l)
	acted := a.s.Config.Version != an.Config.Version || a.s.Verifying != nil || a.s.CooldownUntil != cooldown
	a.mu.Unlock()
	if acted {
		l.fleetRelease(a, w)
		return false
	}
	return true
}

// fleetRelease gives the agent's lease back, as an operation of the
// chain w; not when the fleet is down (it expires). When w's time is
// spent, the flusher gives it back, off the caller's path
// (fleetReleaseLater).
func (l *Loop) fleetRelease(a *agent, w *fleetWait) {
	if l.fleet.down.Load() {
		return
	}
	ctx, done, ok := l.fleet.op(w)
	if !ok {
		l.fleetReleaseLater(a)
		return
	}
	defer done()
	if err := cut(ctx, l.fleet.f.Release(ctx, a.id, l.fleet.replica)); err != nil {
		l.fleetErr(a, err)
		if errors.Is(err, errFleetSlow) {
			l.fleetReleaseLater(a) // not down: the flusher gives it back
		}
	}
}

// fleetReleaseLater asks the flusher to give a's lease back: the call
// that held it had spent its fleet time.
func (l *Loop) fleetReleaseLater(a *agent) {
	fl := l.fleet
	fl.relMu.Lock()
	if len(fl.rel) < maxFleetReleases {
		fl.rel = append(fl.rel, a)
	}
	fl.relMu.Unlock()
	select {
	case fl.kick <- struct{}{}:
	default:
	}
}

// maxFleetReleases bounds the leases waiting for the flusher to give
// them back; beyond it they expire.
const maxFleetReleases = 1024

// fleetReleases gives back the leases fleetReleaseLater queued, all
// within one fleet timeout (best effort: a lease not given back expires).
// A lease of an agent whose strategy runs again here is left to that
// run, which holds it; while one is given back, the agent takes no lease
// (fleetLease). flushMu is held.
func (l *Loop) fleetReleases() {
	fl := l.fleet
	fl.relMu.Lock()
	rel := fl.rel
	fl.rel = nil
	fl.relMu.Unlock()
	if len(rel) == 0 || fl.down.Load() {
		return
	}
	ctx, cancel := fl.ctx()
	defer cancel()
	for _, a := range rel {
		a.mu.Lock()
		run := a.s.analyzing
		a.fl.releasing = !run
		a.mu.Unlock()
		if run {
			continue
		}
		err := fl.f.Release(ctx, a.id, fl.replica)
		a.mu.Lock()
		a.fl.releasing = false
		a.mu.Unlock()
		if err != nil {
			l.fleetErr(a, err)
			return
		}
	}
}
