package replica

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// The errors of the fleet. The root package exports ErrConflict and
// ErrUnavailable as selfimprove.ErrFleetConflict and
// selfimprove.ErrFleetUnavailable (the same values).
var (
	// ErrConflict: another replica committed first.
	ErrConflict = errors.New("selfimprove: fleet: revision moved on")
	// ErrUnavailable: the fleet could not be reached.
	ErrUnavailable = errors.New("selfimprove: fleet unavailable")
	// ErrSlow: the chain's fleet time is spent; the operation was not
	// tried (or was cut by the chain's deadline), and the fleet is not
	// marked down (it answered, slowly).
	ErrSlow = fmt.Errorf("%w: the fleet timeout of the call is spent (the fleet answers slowly)", ErrUnavailable)
)

// What one call or operator method may wait on the fleet, in all
// (docs/fleet.md, "The timeout holds"): the fleet timeout, from the start
// of the chain of operations it starts (the lease and the reload of a
// strategy run, the commit of its decision, the reload after a conflict
// or a notification, the sending of the counts under verification and
// the commit of the decision they make) to its end, whatever it waits on
// in between: the agent's lock, its save behind another decision's, a
// flush under way. Only the strategy's own run and fn's are not counted
// (Exclude, Pause): they have timeouts of their own.

// Chain is the fleet time of one chain of operations: the fleet timeout
// from its start, plus the time excluded since; safe for concurrent use.
// A nil *Chain stands for a fresh chain (Link.Chain).
type Chain struct {
	start  time.Time    // monotonic
	budget atomic.Int64 // ns
	paused atomic.Int64 // 1 + ns from start to the pause, while paused; 0: not
}

// NewChain starts a chain with timeout to spend.
func NewChain(timeout time.Duration) *Chain {
	w := &Chain{start: time.Now()}
	w.budget.Store(int64(timeout))
	return w
}

// Pause stops w's clock: fn runs (see Resume).
func (w *Chain) Pause() { w.paused.Store(1 + int64(time.Since(w.start))) }

// Resume starts w's clock again after a Pause, not counting the pause.
func (w *Chain) Resume() {
	if p := w.paused.Swap(0); p != 0 {
		w.Exclude(time.Since(w.start) - time.Duration(p-1))
	}
}

// Left returns the time w has left.
func (w *Chain) Left() time.Duration {
	return time.Duration(w.budget.Load()) - time.Since(w.start)
}

// Exclude does not count d, a time the chain spent on what has its own
// timeout (the strategy's run, fn's), in its fleet time.
func (w *Chain) Exclude(d time.Duration) { w.budget.Add(int64(d)) }

// Chain returns w, or a fresh chain's allowance (the fleet timeout) when
// w is nil.
func (k *Link) Chain(w *Chain) *Chain {
	if w == nil {
		w = NewChain(k.Timeout)
	}
	return w
}

// Op returns the context for the chain w's next operation on the fleet,
// bounded by the time w has left, and done, which ends it; ok is false,
// and nothing is to be tried, when less than a tenth of the fleet timeout
// is left (ErrSlow). A nil w is a fresh chain.
func (k *Link) Op(w *Chain) (ctx context.Context, done func(), ok bool) {
	left := k.Chain(w).Left()
	if left < k.Timeout/10 {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	if left <= k.Timeout/2 {
		ctx = context.WithValue(ctx, shortOp{}, left)
	}
	return ctx, cancel, true
}

// shortOp marks the context of an operation given at most half the fleet
// timeout (its value: the time it was given), what was left of its
// chain's after earlier operations or its wait for the agent's save.
type shortOp struct{}

// Cut returns err, the error of an operation run under ctx (from Op), as
// ErrSlow when the operation had what its chain had left, at most half
// the fleet timeout, and failed at its deadline, or within the reply
// allowance before it (a commit Redis ran too late to land answers so):
// the chain's earlier operations took the rest, so the fleet answers
// slowly, and it is not to be marked down for it. An operation given
// more than half the timeout that gets no answer in it (the first of a
// chain, every one of the flusher's), and one that fails at once (a
// refused connection), mark it down: a hang that begins in a chain is
// told apart from a slow fleet by the time the operation had. Other
// errors are returned as they are.
func Cut(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSlow) {
		return err
	}
	left, short := ctx.Value(shortOp{}).(time.Duration)
	dl, _ := ctx.Deadline()
	// The deadline passed, or the answer came within the reply allowance
	// before it (a commit Redis ran too late to land answers so: see
	// docs/fleet.md), rather than at once (a refused connection).
	if short && time.Until(dl) <= left/10+time.Millisecond {
		return fmt.Errorf("%w: %w", ErrSlow, err)
	}
	return err
}
