package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// What one call or operator method may wait on the fleet, in all
// (docs/fleet.md, "The timeout holds"): WithFleetTimeout, from the start
// of the chain of operations it starts (the lease and the reload of a
// strategy run, the commit of its decision, the reload after a conflict
// or a notification, the sending of the counts under verification and
// the commit of the decision they make) to its end, whatever it waits on
// in between: the agent's lock, its save behind another decision's, a
// flush under way. Only the strategy's own run and fn's (a chain started
// by a call's load of a new agent, or by a probe's claim, is paused while
// fn runs) are not counted: they have timeouts of their own. Events for the
// fleet's log are sent by the flusher, off every caller's path.

// fleetWait is the fleet time of one chain of operations: the fleet
// timeout from start, plus the time excluded since; safe for concurrent
// use. A nil *fleetWait stands for a fresh chain (fleetLink.wait).
type fleetWait struct {
	start  time.Time    // monotonic
	budget atomic.Int64 // ns
	paused atomic.Int64 // 1 + ns from start to the pause, while paused; 0: not
}

// pause stops w's clock: fn runs (see resume).
func (w *fleetWait) pause() { w.paused.Store(1 + int64(time.Since(w.start))) }

// resume starts w's clock again after a pause, not counting the pause.
func (w *fleetWait) resume() {
	if p := w.paused.Swap(0); p != 0 {
		w.exclude(time.Since(w.start) - time.Duration(p-1))
	}
}

// left returns the time w has left.
func (w *fleetWait) left() time.Duration {
	return time.Duration(w.budget.Load()) - time.Since(w.start)
}

// exclude does not count d, a time the chain spent on what has its own
// timeout (the strategy's run, fn's), in its fleet time.
func (w *fleetWait) exclude(d time.Duration) { w.budget.Add(int64(d)) }

// errFleetSlow: the chain's fleet time is spent; the operation was not
// tried, and the fleet is not marked down (it answered, slowly).
var errFleetSlow = fmt.Errorf("%w: the fleet timeout of the call is spent (the fleet answers slowly)", ErrFleetUnavailable)

// wait returns w, or a fresh chain's allowance (the fleet timeout) when w
// is nil.
func (fl *fleetLink) wait(w *fleetWait) *fleetWait {
	if w == nil {
		w = &fleetWait{start: time.Now()}
		w.budget.Store(int64(fl.timeout))
	}
	return w
}

// op returns the context for the chain w's next operation on the fleet,
// bounded by the time w has left, and done, which ends it; ok is false,
// and nothing is to be tried, when less than a tenth of the fleet timeout
// is left (errFleetSlow). A nil w is a fresh chain.
func (fl *fleetLink) op(w *fleetWait) (ctx context.Context, done func(), ok bool) {
	left := fl.wait(w).left()
	if left < fl.timeout/10 {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	if left <= fl.timeout/2 {
		ctx = context.WithValue(ctx, shortOp{}, left)
	}
	return ctx, cancel, true
}

// shortOp marks the context of an operation given at most half the fleet
// timeout (its value: the time it was given), what was left of its
// chain's after earlier operations or its wait for the agent's save.
type shortOp struct{}

// cut returns err, the error of an operation run under ctx (from op), as
// errFleetSlow when the operation had what its chain had left, at most
// half the fleet timeout, and failed at its deadline, or within the reply
// allowance before it (a commit Redis ran too late to land answers so):
// the chain's earlier operations took the rest, so the fleet answers
// slowly, and it is not marked down for it (fleetErr). An operation given
// more than half the timeout that gets no answer in it (the first of a
// chain, every one of the flusher's), and one that fails at once (a
// refused connection), mark it down: a hang that begins in a chain is
// told apart from a slow fleet by the time the operation had. Other
// errors are returned as they are (TestCut).
func cut(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, ErrFleetUnavailable) || errors.Is(err, errFleetSlow) {
		return err
	}
	left, short := ctx.Value(shortOp{}).(time.Duration)
	dl, _ := ctx.Deadline()
	// The deadline passed, or the answer came within the reply allowance
	// before it (a commit Redis ran too late to land answers so: see
	// docs/fleet.md), rather than at once (a refused connection).
	if short && time.Until(dl) <= left/10+time.Millisecond {
		return fmt.Errorf("%w: %w", errFleetSlow, err)
	}
	return err
}

// callWait returns the fleet time of the call c of a, which its load of
// the agent, a probe's claim, its decision's save (the wait for the
// agent's save included) and its counts under verification share; it
// starts it if the call has not waited on the fleet yet. Nil without a
// fleet.
func (l *Loop) callWait(a *agent, c *call) *fleetWait {
	if a.fl != nil && c.fw == nil {
		c.fw = l.fleet.wait(nil)
	}
	return c.fw
}

// maxFleetEvents bounds the events waiting for the flusher to go to the
// fleet's log; beyond it the oldest are dropped (they are in the store).
const maxFleetEvents = 4096

// fleetLog queues events for the fleet's log, sent by the next flush
// (fleetSendEvents), and asks for one.
func (l *Loop) fleetLog(evs []queued) {
	if len(evs) == 0 {
		return
	}
	fl := l.fleet
	fl.evMu.Lock()
	for _, q := range evs {
		fl.evs = append(fl.evs, *q.ev)
	}
	if n := len(fl.evs) - maxFleetEvents; n > 0 {
		fl.evs = append(fl.evs[:0], fl.evs[n:]...)
		l.m.fleetErrors.Add(1)
		l.log.Error("selfimprove: events for the fleet's log dropped: the fleet has not taken them", "count", n)
	}
	fl.evMu.Unlock()
	select {
	case fl.kick <- struct{}{}:
	default:
	}
}

// fleetSendEvents sends the queued events to the fleet's log; while the
// fleet cannot be reached they wait for the next flush, a refusal drops
// them. flushMu is held.
func (l *Loop) fleetSendEvents() {
	fl := l.fleet
	fl.evMu.Lock()
	evs := fl.evs
	fl.evs = nil
	fl.evMu.Unlock()
	if len(evs) == 0 || fl.down.Load() {
		fl.requeue(evs)
		return
	}
	ctx, cancel := fl.ctx()
	err := fl.f.AppendEvents(ctx, evs)
	cancel()
	switch {
	case err == nil:
		l.fleetUp()
	case errors.Is(err, ErrFleetUnavailable):
		l.fleetErr(nil, err)
		fl.requeue(evs)
	default:
		l.fleetErr(nil, fmt.Errorf("cannot add %d events to the fleet's log: %w", len(evs), err))
	}
}

// requeue puts evs back before the events queued since.
func (fl *fleetLink) requeue(evs []Event) {
	if len(evs) == 0 {
		return
	}
	fl.evMu.Lock()
	fl.evs = append(evs, fl.evs...)
	if n := len(fl.evs) - maxFleetEvents; n > 0 {
		fl.evs = fl.evs[n:]
	}
	fl.evMu.Unlock()
}

// saveLock is a mutex whose waiters wait on a channel (a wait the
// scheduler, and testing/synctest, see as blocked on the holder); the
// zero value is unlocked. A holder with a fleet holds it for one chain
// of waits on the fleet at most (fleetWait). It is one word, so that an
// agent stays in its 3456-byte size class (TestAgentSizeClass): nil when
// unlocked, lockedAlone when held with no waiter, else the channel the
// waiters wait on, closed at the next Unlock (the only allocation, and
// only under contention).
type saveLock struct {
	p atomic.Pointer[chan struct{}]
}

// lockedAlone marks a saveLock held with no waiter; it is never closed.
var lockedAlone = make(chan struct{})

// Lock takes the lock.
func (s *saveLock) Lock() { s.lockWithin(-1) }

// lockWithin takes the lock if it can within d (d < 0: however long it
// takes), and reports whether it did.
func (s *saveLock) lockWithin(d time.Duration) bool {
	var expired <-chan time.Time
	for {
		if s.p.CompareAndSwap(nil, &lockedAlone) {
			return true
		}
		cur := s.p.Load()
		if cur == nil {
			continue
		}
		if cur == &lockedAlone {
			free := make(chan struct{})
			if !s.p.CompareAndSwap(cur, &free) {
				continue
			}
			cur = &free
		}
		if d >= 0 && expired == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-*cur:
		case <-expired:
			return false
		}
	}
}

// Unlock releases the lock, and wakes its waiters.
func (s *saveLock) Unlock() {
	if c := s.p.Swap(nil); c != nil && c != &lockedAlone {
		close(*c)
	}
}
