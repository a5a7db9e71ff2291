package selfimprove

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Budget bounds the attempts and the cost of one call, or of a task: all
// the calls made with a context that carries it (WithBudget), the calls
// nested in them included, since their contexts derive from the task's. A
// zero field sets no bound; the config's MaxAttempts still caps each
// call. It is safe for concurrent use.
//
// The budget is checked before every attempt. Once it is spent (a call's
// Attempts made, TaskAttempts made in all, or Cost reached), a call that
// has made attempts stops retrying and returns its last error, and a call
// that has made none returns at once, without running fn or being
// recorded, with an error that says the budget is spent; both report
// Report.BudgetExhausted.
//
// Nested calls: every attempt of a call that carries the budget counts
// toward TaskAttempts, but for an attempt whose fn makes calls of its own
// with the same budget (a task's outer call, whose fn runs the steps as
// calls): its count goes back when its first nested call starts, so that
// TaskAttempts counts the attempts that do the work, the requests. An
// outer call's retry runs fn again, and every attempt of the nested calls
// it makes draws from the same budget; each nested call also retries
// under its own config. So a task of 2 attempts whose 5 steps allow 3
// attempts each may send 2 × 5 × 3 = 30 requests; with TaskAttempts 7 it
// sends 7 at most, and once they are spent the next step is refused, the
// task's function returns (with that error, or its own), and the task's
// retry is refused too. A call draws from the budget nearest in its
// context only: a step given a budget of its own no longer counts toward
// the task's.
type Budget struct {
	// Attempts caps the attempts of each call that carries the budget.
	// Default 0: the config's MaxAttempts alone.
	Attempts int
	// TaskAttempts caps the attempts of all the calls that carry the
	// budget, together, counted as above. Default 0: no bound.
	TaskAttempts int
	// Cost caps the cost reported with AddCost by all the calls that
	// carry the budget, together: no attempt starts once it is reached.
	// Default 0: no cost bound.
	Cost float64

	mu        sync.Mutex
	spent     float64
	made      int // attempts counted toward TaskAttempts
	exhausted bool
}

// Spent returns the cost reported so far, and whether a call stopped, or
// was refused, because the budget was spent.
func (b *Budget) Spent() (cost float64, exhausted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent, b.exhausted
}

// Attempted returns the attempts counted toward TaskAttempts so far: the
// attempts of the calls that carry b, but for those that made calls of
// their own with b (see Budget).
func (b *Budget) Attempted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made
}

// take counts attempt number n of the call whose attempt context is c,
// and reports whether the budget allows it; it marks the budget
// exhausted when it does not.
func (b *Budget) take(c *callCtx, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeLocked(c, n)
}

func (b *Budget) takeLocked(c *callCtx, n int) bool {
	if (b.Attempts > 0 && n > b.Attempts) || (b.TaskAttempts > 0 && b.made >= b.TaskAttempts) || (b.Cost > 0 && b.spent >= b.Cost) {
		b.exhausted = true
		return false
	}
	b.made++
	c.drawn = true
	return true
}

// open starts a call of agentID that carries b, with context ctx: it
// returns the call's attempt context with its first attempt counted, or
// nil when the budget allows no attempt. The attempt the call is nested
// in gets its own count back, when it drew from b; when the call is
// refused, that attempt is told, as of a failed nested call.
func (b *Budget) open(ctx context.Context, agentID string) *callCtx {
	c := &callCtx{Context: ctx, budget: b}
	p, _ := ctx.Value(callKey{}).(*callCtx)
	b.mu.Lock()
	if p != nil && p.budget == b {
		b.giveBackLocked(p)
	}
	ok := b.takeLocked(c, 1)
	b.mu.Unlock()
	if !ok {
		if p != nil {
			p.note(agentID, ErrBudgetSpent)
		}
		return nil
	}
	return c
}

// giveBack uncounts the current attempt of the call whose attempt
// context is c, if it still counts: the attempt made calls of its own, or
// was never made.
func (b *Budget) giveBack(c *callCtx) {
	b.mu.Lock()
	b.giveBackLocked(c)
	b.mu.Unlock()
}

func (b *Budget) giveBackLocked(c *callCtx) {
	if c.drawn {
		c.drawn = false
		b.made--
	}
}

type budgetKey struct{}

// budgets is set once WithBudget was called: until then no context can
// carry a Budget, and a call does not look for one.
var budgets atomic.Bool

// budgetOf returns the Budget ctx carries, or nil.
func budgetOf(ctx context.Context) *Budget {
	if !budgets.Load() {
		return nil
	}
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	return b
}

// WithBudget returns a context that carries b to the calls made with it,
// and to the calls nested in them (see Budget).
func WithBudget(ctx context.Context, b *Budget) context.Context {
	if !budgets.Load() {
		budgets.Store(true)
	}
	return context.WithValue(ctx, budgetKey{}, b)
}

// AddCost adds cost (tokens, cents: the unit is the caller's) to the
// budget ctx carries; without one it does nothing. fn calls it with the
// context it was given.
//
// The cost is also booked with the call, for its config version: its
// mean per successful call is in AgentView, and a change that raises it
// is judged by RollbackPolicy.MaxCostRise. Every tracked call books the
// costs reported with its context, from a Loop's first call on, unless
// the Loop was made WithCallScores(false) (then the Budget alone counts
// them); a cost reported outside any call is booked nowhere (see
// docs/quality.md). A
// negative or NaN cost, or one over 1e12, is not booked, and a call's
// costs add up to 1e12 at most.
func AddCost(ctx context.Context, cost float64) {
	if !(cost >= 0 && cost <= maxRecordCost) {
		return // NaN, negative, or more than any call costs: booked nowhere, the Budget included
	}
	noteCost(ctx, cost)
	if b := budgetOf(ctx); b != nil {
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
	// response, as Transport saw it, else as its error reports it (a
	// StatusCode() or HTTPStatusCode() method). Default 0: none seen.
	LastStatus int
	// Waited is how long the loop waited before this attempt. Default 0:
	// it did not wait.
	Waited time.Duration
	// WaitReason says why it waited that long: failure.WaitBackoff (the
	// config's Backoff), failure.WaitHeader followed by the header's name
	// ("header retry-after"), failure.WaitErrorMethod or
	// failure.WaitProviderMessage (see RetryPolicy). Default
	// failure.WaitNone: it did not wait.
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
