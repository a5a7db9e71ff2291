package selfimprove

// This file is the driver. Every change to an agent's state is an input
// to its state machine: agentState, with the replication's own state
// (replica.State, in the agent's fleetAgent) under the same lock. Loop.step
// is the one place that gives it one, in the manner of etcd raft's Step
// and Ready: it locks the agent, applies the input, which changes the
// state and books in an effects value everything to be done, carries out
// under the lock what must be (commitLocked: publish the config to calls,
// mirror the circuit, queue the events in decision order, take the
// decision's batch for the save), reopens the fast path, unlocks, and
// carries out the rest (carry), in this order:
//
//  1. what the input saw, loop-wide: the circuit index, the failures for
//     the shared causes and the failure memory, dead routes and
//     account-wide causes;
//  2. the proposals filed, listed before they are saved;
//  3. the save, before any decision is announced: the save logs the
//     decision's events and hands them to the notifier; a decision whose
//     save fails is reported failed (a change it applied is taken back,
//     by an input of its own), and only a saved one is reported done;
//  4. the fix outcomes, for the failure memory, once saved;
//  5. an analysis to start, or the call's counts for the fleet to judge;
//  6. what a fleet's answer asks (fleetLink.carry): the events of a
//     decision whose lost answer landed after all, a landed commit's
//     events for the fleet's log, then the replication's Next: a state
//     to take (an input of its own), a refresh, a flush.
//
// A fleet's answers (a commit landed, in conflict, unreachable, refused,
// not sent; a load; a notification; a state to take) are inputs too
// (inFleet): the replication's state machine (replica.State) takes them
// under the agent's lock, and a state taken changes the agent's
// (fleet_commit.go). So is the replication's bookkeeping: what the
// flusher, a commit and a lease change of the agent's link to the fleet
// (bookFleetLocked, in fleet_commit.go; TestFleetStateByInputs). One
// input is given under locks its caller holds (applyHeld): a probe's
// claim in a fleet (inClaim), which must be atomic with the Begin of the
// save that commits it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// inputKind says which input an input is.
type inputKind uint8

const (
	inCall     inputKind = iota + 1 // a call's outcome: c, sig (call.go)
	inScore                         // a score of a call: low, score (quality.go)
	inAnalysis                      // a strategy's answer: an, th, tw, also, err (analysis.go)
	inCause                         // an account-wide cause raised: h, cause (call_routes.go)
	inPooled                        // the fleet's pooled counts: d, p (fleet_pool.go)
	inFleet                         // the fleet's answer to the replication: fleet (fleet_commit.go)
	inClaim                         // a probe's claim, in a fleet: home (call_routes.go; fleetLink.claimProbe)
	inFunc                          // a transition as a function: an operator's action, a take-back: op
)

// lockMode says how Loop.step finds and locks the agent of an input.
type lockMode uint8

const (
	lockLoad lockMode = iota // the live agent of the ID, loaded if need be (Loop.lockAgent)
	lockThis                 // the agent given, even if evicted meanwhile
	lockLive                 // the agent given, unless evicted: then nothing happens
	lockHeld                 // the agent given, which the caller has locked and settled
)

// An input is one input to an agent's state machine: its kind, and the
// values of that kind.
type input struct {
	kind inputKind
	lock lockMode
	now  int64 // Unix ns; 0: the clock's, once locked

	c   *call  // inCall
	sig string // inCall: the failure's signature (a string: its []byte conversions are then zero-copy)

	low   uint64  // inScore: the call ID's version bits; the transition sets the version credited
	key   uint64  // inScore: the score's idempotency key (Loop.ScoreCall)
	score float64 // inScore

	// more holds the values of the other kinds. They sit behind a
	// pointer because escape analysis does not tell a struct's fields
	// apart: what the other kinds' transitions keep of theirs (an
	// analysis, a pool, a function) would move a call's own input, and
	// its call, to the heap.
	more *inputMore
}

// inputMore is the values of an input of the kinds other than inCall and
// inScore.
type inputMore struct {
	// tweak is set for an input that may apply a tweak: one saved counts
	// as an improvement, and the failure memory learns it is verified.
	tweak bool

	an   *Analysis // inAnalysis
	th   Threshold // inAnalysis
	tw   *Tweak    // inAnalysis: the strategy's answer
	also []Tweak   // inAnalysis: proposals for the window's other clusters
	err  error     // inAnalysis: the strategy's error

	h     *holdNote // inCause
	cause string    // inCause: its ID

	d *FleetDelta // inPooled: the delta sent
	p *FleetPool  // inPooled: the pool that answered it
	// prior: d held calls of other generations (fleetTally.prior): its
	// pool brings the totals, never a verification's or the arms' counts.
	prior bool
	// bad: p's counts are beyond what the state holds (FleetCounts.fits):
	// refused, nothing booked.
	bad bool
	// fails are, for inPooled, the other replicas' failures the pool
	// brought, found by the transition.
	fails []FleetFailure
	known []fixNote // inPooled: the fix outcomes in force, which the failures attach to

	fleet *fleetInput // inFleet

	// home is, for inClaim, set for a probe of the primary route (else a
	// held agent's); the transition sets breaker (a breaker's probe: not
	// claimed) and due (claimed).
	home, breaker, due bool

	// op is an inFunc's transition; an error refuses the input (its
	// effects under the lock still happen, nothing is saved).
	op func(a *agent) (effects, error)
	// undo, when set, is the transition that takes back the change ch
	// the input applied when it cannot be saved (a change that cannot be
	// recorded is not made); not after the fleet's errors, which have
	// already put back the fleet's state.
	undo func(a *agent, ch *Change) effects
}

// step gives the input in to agent a, or to agent id's for lockLoad (a
// nil: found or loaded), and carries out what it decides (see the
// file's comment). rep gets the outcome, w is the caller's waits on the
// replication (zero: none yet; see waits). It returns the agent it ran
// on, and an error when no agent could be had or the transition refused
// the input.
func (l *Loop) step(ctx context.Context, a *agent, id string, in *input, rep *Report, w waits) (*agent, error) {
	switch in.lock {
	case lockLoad:
		var err error
		if a, err = l.lockAgent(a, id, in.now); a == nil {
			return nil, err
		}
	case lockThis, lockLive:
		a.mu.Lock()
		if !a.evicted {
			a.settleLocked(l.stepNow(in))
		} else if in.lock == lockLive {
			a.mu.Unlock()
			return a, nil
		}
	}
	return a, l.stepLocked(ctx, a, in, rep, w)
}

// operate runs an operator transition on agentID's state, loading or
// creating the agent, and saves it before returning. A transition that
// fails changes nothing. After Close it returns ErrClosed.
func (l *Loop) operate(agentID string, f func(a *agent) (effects, error)) error {
	return l.operateUndo(agentID, f, nil)
}

// operateUndo is operate for a transition that applies a change, which
// undo takes back when it cannot be saved (see inputMore.undo): a change
// that cannot be recorded is not made.
func (l *Loop) operateUndo(agentID string, f func(a *agent) (effects, error), undo func(a *agent, ch *Change) effects) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	var w waits // the method's waits on the replication, every try's
	if l.fleet != nil {
		w.c = l.fleet.Chain(nil)
	}
	for try := 0; ; try++ {
		in := input{kind: inFunc, more: &inputMore{op: f, undo: undo}}
		var rep Report
		if _, err := l.step(context.Background(), nil, agentID, &in, &rep, w); err != nil {
			return err
		}
		if errors.Is(rep.LoopErr, ErrFleetConflict) && try < 3 {
			continue // another replica decided first: again, on its state
		}
		return rep.LoopErr
	}
}

// stepNow is the time of in, the clock's when it has none.
func (l *Loop) stepNow(in *input) int64 {
	if in.now == 0 {
		in.now = l.clock.Now().UnixNano()
	}
	return in.now
}

// stepLocked is step, from the locked agent on: it applies in, carries
// out under the lock what must be, unlocks a and carries out the rest.
func (l *Loop) stepLocked(ctx context.Context, a *agent, in *input, rep *Report, w waits) error {
	l.stepNow(in)
	var eff effects
	if a.fl != nil && a.tallyLocked(in, l.fleet.calls) { // the counts of the config that served, before it moves
		l.fleet.Kick()
	}
	err := a.apply(l, in, &eff)
	if a.fl != nil && in.kind == inCall {
		eff.judge = a.s.Verifying != nil && !in.c.ignored
	}
	var b *fleetBatch
	if eff.publish || eff.circuit || eff.probe || eff.save || len(eff.events) > 0 {
		b = a.commitLocked(&eff, l.canaryCut > 0)
	}
	a.reopenLocked()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	l.carry(ctx, a, in, &eff, b, rep, w)
	return nil
}

// applyHeld gives in to a, which the caller has locked and settled and
// goes on holding: for a transition that must be atomic with what the
// caller does next under the same lock (a probe's claim, with the Begin
// of the save that commits it: fleetLink.claimProbe). It carries out
// under the lock what must be (commitLocked); the caller saves, and
// reopens nothing (a save leaves the fast path to the next input).
func (l *Loop) applyHeld(a *agent, in *input) error {
	l.stepNow(in)
	var eff effects
	err := a.apply(l, in, &eff)
	if eff.publish || eff.circuit || eff.probe || eff.save || len(eff.events) > 0 {
		a.commitLocked(&eff, l.canaryCut > 0)
	}
	return err
}

// apply applies in to a's state machine, which books in eff what is to
// be done. a.mu is held and a is settled.
func (a *agent) apply(l *Loop, in *input, eff *effects) error {
	switch in.kind {
	case inCall:
		a.applyCall(l, in, eff)
	case inScore:
		return a.applyScore(l, in, eff)
	case inAnalysis:
		a.applyAnalysis(l, in, eff)
	case inCause:
		a.applyCause(l, in, eff)
	case inPooled:
		a.applyPooled(l, in, eff)
	case inFleet:
		a.applyFleet(l, in.more.fleet, eff)
	case inClaim:
		a.applyClaim(l, in, eff)
	case inFunc:
		var err error
		*eff, err = in.more.op(a)
		return err
	}
	return nil
}

// carry carries out, in order, the effects eff of the input in to a,
// after a's lock was released (see the file's comment): b is the batch
// of its decision (commitLocked), rep gets the outcome, and its waits on
// the replication are w's (zero: started when needed).
func (l *Loop) carry(ctx context.Context, a *agent, in *input, eff *effects, b *fleetBatch, rep *Report, w waits) {
	if eff.moved {
		l.circuitMoved(a, in.c, eff.until)
	}
	l.observe(a, in, eff)
	if eff.dead != nil || eff.hold != nil {
		l.routeEffects(a, eff, time.Unix(0, in.now), l.callWait(a, &w))
	}
	if eff.refused != nil && in.more != nil {
		l.tweakRefused(a, in, eff, rep)
	}
	if len(eff.proposals) > 0 {
		// Listed before they are saved (see Loop.analyze).
		rep.LoopErr = errors.Join(rep.LoopErr, l.addProposalAgent(a.id))
		l.props.note(a.id, eff.proposals)
	}
	switch {
	case eff.decided != nil:
		l.decided(a, eff, b, rep, l.callWait(a, &w))
	case eff.analysis != nil:
		l.remember(eff.fixes)
		rep.ImprovementTriggered = true
		l.startAnalysis(ctx, a, eff.analysis, eff.th, rep, l.callWait(a, &w))
	case eff.save:
		if err := l.persistWait(a, l.callWait(a, &w), b); err != nil {
			rep.LoopErr = errors.Join(rep.LoopErr, l.unsaved(ctx, a, in, eff, err))
			return
		}
		l.saved(in, eff, rep)
	default:
		l.remember(eff.fixes)
		if eff.judge {
			l.fleet.judge(a, rep, w.c)
		}
	}
	if in.kind == inFleet {
		l.fleet.carry(ctx, a, &in.more.fleet.next, w.c)
	}
}

// decided saves a decision on a change (a rollback or a confirmation) and
// reports it: as made once saved; as not made when the fleet took it
// back. One that could not be saved otherwise stands in memory, and a
// rollback's failure is reported (rollbackUnsaved).
func (l *Loop) decided(a *agent, eff *effects, b *fleetBatch, rep *Report, w waits) {
	err := l.persistWait(a, w, b)
	if err != nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
		if isFleetErr(err) {
			return // another replica decided first, or the fleet cannot be reached: not taken
		}
	}
	l.remember(eff.fixes)
	if eff.decision == EventRolledBack {
		l.m.rollbacks.Add(1)
		rep.Rollback = eff.decided
		if err != nil {
			l.rollbackUnsaved(a, eff.decided, err)
		}
		return
	}
	l.m.confirmations.Add(1)
	rep.Confirmed = eff.decided
}

// saved reports what the saved effects eff of in applied: a tweak
// counts as an improvement, whose fix the failure memory learns is
// under verification; a route change of the loop's own is reported too.
func (l *Loop) saved(in *input, eff *effects, rep *Report) {
	l.remember(eff.fixes)
	ch := eff.applied
	if ch == nil {
		return
	}
	rep.Improvement = ch
	if in.more != nil && in.more.tweak {
		l.m.improvements.Add(1)
		if f, ok := fixNoteOf(ch, FixVerifying, ch.AppliedAt); ok {
			l.mem.addFix(f.cluster, f.fix)
		}
	}
}

// unsaved takes back, with in's undo, the change that in applied and
// could not be saved for err, and returns the error to report.
func (l *Loop) unsaved(ctx context.Context, a *agent, in *input, eff *effects, err error) error {
	ch := eff.applied
	if ch == nil || in.more == nil || in.more.undo == nil {
		return err
	}
	if !isFleetErr(err) {
		undo := in.more.undo
		op := input{kind: inFunc, lock: lockThis, more: &inputMore{op: func(a *agent) (effects, error) { return undo(a, ch), nil }}}
		var rep Report
		l.step(ctx, a, a.id, &op, &rep, waits{})
	}
	return fmt.Errorf("selfimprove: change not applied: %w", err)
}

// tweakRefused reports a tweak that the strategy's answer in could not apply
// (eff.refused): as an error when nothing else was applied.
func (l *Loop) tweakRefused(a *agent, in *input, eff *effects, rep *Report) {
	if in.more.err == nil {
		if eff.rejected {
			l.m.rejectedTweaks.Add(1)
		}
		l.log.Warn("selfimprove: tweak not applied", "agent", a.id, "error", eff.refused)
	}
	if eff.applied == nil {
		rep.LoopErr = errors.Join(rep.LoopErr, eff.refused)
	}
}

// observe hands the failures input in brought to the shared causes and
// the failure memory: a call's own (not one ignored, or passed on from a
// call nested in it), or the other replicas' in the fleet's pool.
func (l *Loop) observe(a *agent, in *input, eff *effects) {
	if c := in.c; c != nil && c.failed && !c.ignored && !c.nested() {
		l.shared.observe(a.id, c.cluster, []byte(in.sig), c.class, c.end.UnixNano(), eff.window)
		l.mem.observe(a.id, c.cluster, []byte(in.sig), c.class, c.end.UnixNano())
	}
	l.remember(eff.learned)
	x := in.more
	if x == nil {
		return
	}
	for i := range x.fails {
		f := &x.fails[i]
		var buf [4 * failure.MaxSignature]byte
		sig := failure.AppendSignature(buf[:0], f.Text)
		cl := failure.ClusterOf(sig)
		l.shared.observe(a.id, cl, sig, f.Class, f.EndNS, eff.window)
		l.mem.observe(a.id, cl, sig, f.Class, f.EndNS)
	}
	l.remember(x.known)
}

// callWait returns the waits *w of a call of a, which its load of the
// agent, a probe's claim, its decision's save (the wait for the agent's
// save included) and its counts under verification share; with a fleet,
// it starts their clock if the call has not waited yet.
func (l *Loop) callWait(a *agent, w *waits) waits {
	if a.fl != nil && w.c == nil {
		w.c = l.fleet.Chain(nil)
	}
	return *w
}
