package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// This file is what a call knows of the calls nested in it: a call made
// with a context derived from an attempt's context (a task whose steps
// are calls of their own) leaves its failure in that context, so that the
// outer call can tell a failure it only passed on from one of its own.

// callKey finds a call's attempt context.
type callKey struct{}

// callCtx is a call's attempt context: its parent, plus what Transport
// saw of the attempt's failed responses, what the calls nested in the
// attempt left for it, and the budget the call's attempts draw from. A
// call has one when its config allows retries, when its context carries a
// Budget, or when its agent was seen to pass on the failures of other
// calls (agent.nests); the common call, of one attempt, has none and
// allocates nothing.
type callCtx struct {
	context.Context
	mu     sync.Mutex
	status int
	wait   time.Duration
	why    string
	// inner are the failures of the calls nested in the current attempt,
	// the latest at inner[(n-1)%maxInner].
	inner [maxInner]innerFailure
	n     int
	// budget is the Budget the call's attempts draw from; nil: none.
	// drawn, guarded by budget.mu, says that the current attempt's draw
	// still counts (see Budget).
	budget *Budget
	drawn  bool
	// loop is the Loop of the call, for AddCost (see Loop.slots).
	loop *Loop
}

// unbudget uncounts the attempt c's budget, if any, counted last: the
// call did not make it after all.
func (c *callCtx) unbudget() {
	if c != nil && c.budget != nil {
		c.budget.giveBack(c)
	}
}

// maxInner is how many failures of nested calls an attempt keeps: fn's
// error is compared with each.
const maxInner = 4

// innerFailure is a nested call's failure: its agent and the error it
// returned.
type innerFailure struct {
	agent string
	err   error
}

// Value returns c itself for callKey.
func (c *callCtx) Value(k any) any {
	if k == (callKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// set records a failed response: its status, and its wait when it is the
// longest of the attempt.
func (c *callCtx) set(status int, d time.Duration, why string) {
	c.mu.Lock()
	c.status = status
	if d > c.wait {
		c.wait, c.why = d, why
	}
	c.mu.Unlock()
}

// take returns what Transport recorded since the last take and clears it.
func (c *callCtx) take() (status int, d time.Duration, why string) {
	if c == nil {
		return 0, 0, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	status, d, why = c.status, c.wait, c.why
	c.status, c.wait, c.why = 0, 0, ""
	return status, d, why
}

// note keeps the failure of a call of agent nested in the current
// attempt, which returned err.
func (c *callCtx) note(agent string, err error) {
	c.mu.Lock()
	c.inner[c.n%maxInner] = innerFailure{agent, err}
	c.n++
	c.mu.Unlock()
}

// next starts a new attempt: the failures of the calls nested in the
// last one are forgotten.
func (c *callCtx) next() {
	c.mu.Lock()
	c.inner, c.n = [maxInner]innerFailure{}, 0
	c.mu.Unlock()
}

// from returns the agent of the latest call nested in the current
// attempt whose returned error err is, or wraps (see passesOn); "" when
// none.
func (c *callCtx) from(err error) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := c.n - 1; i >= max(c.n-maxInner, 0); i-- {
		if f := &c.inner[i%maxInner]; passesOn(err, f.err) {
			return f.agent
		}
	}
	return ""
}

// passesOn reports whether err is target, or wraps it: target is found,
// as itself (==), on err's chain as failure.Walk walks it, bounded. A
// method of the chain that panics, or a comparison that does, gives
// false.
func passesOn(err, target error) (found bool) {
	defer func() {
		if recover() != nil {
			found = false
		}
	}()
	if target == nil {
		return false
	}
	failure.Walk(err, func(e error) bool {
		found = e == target
		return !found
	})
	return found
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

// maxFrom bounds the agent ID a cluster keeps in Cluster.From.
const maxFrom = 128

// boundFrom is an agent ID as Cluster.From keeps it: cut to maxFrom bytes.
func boundFrom(id string) string {
	return failure.Bound(id, maxFrom)
}

// recentFailures are the errors of the loop's latest failed calls that
// were nested in no attempt context, each with its agent and its number
// in the sequence of such failures, for cause.
type recentFailures struct {
	seq    atomic.Uint64 // failures added; written under mu
	mu     sync.Mutex
	errs   [maxRecentFailures]error
	agents [maxRecentFailures]string
	seqs   [maxRecentFailures]uint64
}

// maxRecentFailures is how many failures recentFailures keeps.
const maxRecentFailures = 16

// add keeps err, of a call of agentID.
func (r *recentFailures) add(agentID string, err error) {
	r.mu.Lock()
	n := r.seq.Load() + 1
	i := n % maxRecentFailures
	r.errs[i], r.agents[i], r.seqs[i] = err, agentID, n
	r.seq.Store(n)
	r.mu.Unlock()
}

// seen reports whether err is, or wraps, an error kept from a call of
// another agent than agentID, added after the first since failures.
func (r *recentFailures) seen(agentID string, err error, since uint64) bool {
	if r.seq.Load() == since {
		return false // none since
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range maxRecentFailures {
		if r.seqs[i] > since && r.agents[i] != agentID && passesOn(err, r.errs[i]) {
			return true
		}
	}
	return false
}

// nestedNote says how many of the window's failures were passed on from
// calls nested in the agent's, and whose they are: "" when none.
func nestedNote(cs []Cluster) string {
	n, agents := 0, []string(nil)
	for _, c := range cs {
		if c.From != "" {
			n += c.Count
			if !slices.Contains(agents, c.From) {
				agents = append(agents, c.From)
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more came from nested calls of %s, left to them", n, quoteList(agents, 3))
}

// quoteList quotes the first n of names, and says how many more.
func quoteList(names []string, n int) string {
	var b strings.Builder
	for i, s := range names[:min(len(names), n)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(failure.Bound(s, 40)))
	}
	if len(names) > n {
		fmt.Fprintf(&b, " and %d more", len(names)-n)
	}
	return b.String()
}

// errBudgetSpent is the error of a call that its Budget refused before
// its first attempt.
var errBudgetSpent = errors.New("selfimprove: budget spent: the call made no attempt")
