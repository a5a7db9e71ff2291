package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCircuitOpen is returned, without running fn, by a call of an agent
// whose circuit is open (see CircuitBreaker).
var ErrCircuitOpen = errors.New("selfimprove: circuit open")

// CircuitBreaker makes an agent's calls fail fast once the loop has run
// out of ideas, as a task is abandoned when its breaker trips. It is off
// unless set with WithCircuitBreaker.
//
// Closed, it counts consecutive failures under the agent's current config.
// After Failures of them with no change under verification (the agent runs
// under the best config the loop has), the circuit opens: calls return ErrCircuitOpen at once, for
// CoolOff. Then it is half-open: one call, the probe, runs fn, and the
// others keep failing fast. A successful probe closes the circuit; a
// failed one opens it for another CoolOff. Calls that fail fast are not
// counted in Stats. Each transition is an event (EventCircuitOpened,
// EventCircuitClosed), and the open state survives a restart.
//
// The state is derived from timestamps when a call arrives: no goroutine
// or timer runs, and a closed circuit costs one atomic load a call.
type CircuitBreaker struct {
	// Failures is how many consecutive failures open the circuit.
	// Default 5.
	Failures int
	// CoolOff is how long the circuit stays open before a probe.
	// Default 30 seconds.
	CoolOff time.Duration
}

// WithCircuitBreaker turns on a circuit breaker for every agent. The zero
// CircuitBreaker takes the defaults.
func WithCircuitBreaker(b CircuitBreaker) Option {
	return func(o *options) {
		if b.Failures <= 0 {
			b.Failures = 5
		}
		if b.CoolOff <= 0 {
			b.CoolOff = 30 * time.Second
		}
		o.breaker = b
	}
}

// admit decides whether a call of a may run fn: it returns probe when the
// call is the probe of a half-open circuit, and ok false when it must fail
// fast.
func (l *Loop) admit(a *agent) (probe, ok bool) {
	until := a.openUntil.Load()
	if until == 0 {
		return false, true
	}
	if l.clock.Now().UnixNano() < until || !a.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// breakerLocked moves a's circuit after a counted call that ended at now,
// and reports whether it moved (its event is queued).
func (l *Loop) breakerLocked(a *agent, probe, failed bool, now time.Time) bool {
	b := l.breaker
	s := &a.s
	open := func(why string) {
		until := now.Add(b.CoolOff).UnixNano()
		s.CircuitOpenUntil = until
		a.openUntil.Store(until)
		a.queueLocked(&Event{ID: newID(now), Time: now.UTC(), Type: EventCircuitOpened, AgentID: a.id,
			Message: fmt.Sprintf("agent %q: circuit opened for %v: %s", a.id, b.CoolOff, why)})
	}
	switch {
	case probe && failed:
		a.probing.Store(false)
		open("the probe failed")
	case probe:
		a.probing.Store(false)
		s.CircuitOpenUntil = 0
		a.openUntil.Store(0)
		a.queueLocked(&Event{ID: newID(now), Time: now.UTC(), Type: EventCircuitClosed, AgentID: a.id,
			Message: fmt.Sprintf("agent %q: circuit closed: the probe succeeded", a.id)})
	case failed && a.openUntil.Load() == 0 && s.Verifying == nil && s.Tracker.consecutiveOf(s.Gen) >= b.Failures:
		open(fmt.Sprintf("%d consecutive failures under config v%d", b.Failures, s.Config.Version))
	default:
		return false
	}
	return true
}

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
	LastClass Class
	// Memories are the remembered failures most similar to LastErr (see
	// Loop.Similar), at most 3, with the fixes tried for them.
	Memories []Memory
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
