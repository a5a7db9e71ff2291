package selfimprove

import (
	"context"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Budget bounds the retries of one call: the loop makes no more than
// Attempts attempts, and stops retrying once the cost fn reported with
// AddCost reaches Cost. A zero field sets no bound. Pass it with
// WithBudget; the loop never exceeds the config's MaxAttempts either. A
// Budget may be shared by the calls of one task: their costs add up. It
// is safe for concurrent use.
type Budget struct {
	// Attempts caps the attempts of one call. Default 0: the config's
	// MaxAttempts alone.
	Attempts int
	// Cost stops retries once the cost reported with AddCost reaches it.
	// Default 0: no cost bound.
	Cost float64

	mu        sync.Mutex
	spent     float64
	exhausted bool
}

// Spent returns the cost reported so far, and whether a call stopped
// retrying because the budget was spent.
func (b *Budget) Spent() (cost float64, exhausted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent, b.exhausted
}

// allows reports whether the budget allows attempt number n, and marks it
// exhausted when it does not.
func (b *Budget) allows(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if (b.Attempts > 0 && n > b.Attempts) || (b.Cost > 0 && b.spent >= b.Cost) {
		b.exhausted = true
		return false
	}
	return true
}

type budgetKey struct{}

// WithBudget returns a context that carries b to the calls made with it.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// AddCost adds cost (tokens, cents: the unit is the caller's) to the
// budget ctx carries; without one it does nothing. fn calls it with the
// context it was given.
func AddCost(ctx context.Context, cost float64) {
	if b, _ := ctx.Value(budgetKey{}).(*Budget); b != nil {
		b.mu.Lock()
		b.spent += cost
		b.mu.Unlock()
	}
}

// Attempt is what the loop knows, on a retry, about the attempts before.
type Attempt struct {
	// Number is this attempt's number: 2 on the first retry.
	Number int
	// LastErr is the previous attempt's error, and LastClass its class.
	LastErr   error
	LastClass failure.Class
	// Memories are the remembered failures most similar to LastErr (see
	// Loop.Similar), at most 3, with the fixes tried for them.
	Memories []Memory
	// LastStatus is the HTTP status of the previous attempt's last failed
	// response, as Transport saw it. Default 0: none seen.
	LastStatus int
	// Waited is how long the loop waited before this attempt. Default 0:
	// it did not wait.
	Waited time.Duration
	// WaitReason says why it waited that long: WaitBackoff (the config's
	// Backoff), WaitHeader followed by the header's name
	// ("header retry-after"), WaitErrorMethod or WaitProviderMessage (see
	// RetryPolicy). Default WaitNone: it did not wait.
	WaitReason string
}

type attemptKey struct{}

// AttemptInfo returns what the loop knows about the previous attempts of
// the call whose context is ctx: fn calls it to change its approach
// between attempts. On a first attempt it returns Attempt{Number: 1} and
// false.
func AttemptInfo(ctx context.Context) (Attempt, bool) {
	if a, _ := ctx.Value(attemptKey{}).(*Attempt); a != nil {
		return *a, true
	}
	return Attempt{Number: 1}, false
}
