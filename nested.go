package selfimprove

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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

// recentFailures are the loop's latest failed calls that were nested in
// no attempt context, each with its agent and its number in the sequence
// of such failures, for cause. It keeps no error value, which could hold
// a whole response alive: only an error's identity (the words of the
// interface value: its type and its data pointer, as numbers the garbage
// collector does not follow) and a fingerprint of its text (its length
// and a hash), so that a new error that the memory of a collected one was
// reused for is not taken for it unless its type and whole text are the
// same too.
type recentFailures struct {
	seq    atomic.Uint64 // failures added; written under mu
	mu     sync.Mutex
	errs   [maxRecentFailures]errPrint
	agents [maxRecentFailures]string
	seqs   [maxRecentFailures]uint64
}

// errPrint is what recentFailures keeps of an error: see there.
type errPrint struct {
	typ, ptr uintptr
	n        int
	sum      uint64
}

// printSeed seeds the text hashes of errPrint.
var printSeed = maphash.MakeSeed()

// printOf returns err's errPrint, and false when err is nil or its Error
// method panics.
func printOf(err error) (p errPrint, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	if err == nil {
		return errPrint{}, false
	}
	w := *(*[2]uintptr)(unsafe.Pointer(&err))
	text := err.Error()
	return errPrint{typ: w[0], ptr: w[1], n: len(text), sum: maphash.String(printSeed, text)}, true
}

// is reports whether err is the error p was taken of: the same type and
// data pointer, and the same text.
func (p *errPrint) is(err error) bool {
	if w := *(*[2]uintptr)(unsafe.Pointer(&err)); w[0] != p.typ || w[1] != p.ptr || p.typ == 0 {
		return false
	}
	q, ok := printOf(err)
	return ok && q == *p
}

// maxRecentFailures is how many failures recentFailures keeps.
const maxRecentFailures = 16

// add keeps err, of a call of agentID.
func (r *recentFailures) add(agentID string, err error) {
	p, ok := printOf(err)
	if !ok {
		return
	}
	r.mu.Lock()
	n := r.seq.Load() + 1
	i := n % maxRecentFailures
	r.errs[i], r.agents[i], r.seqs[i] = p, agentID, n
	r.seq.Store(n)
	r.mu.Unlock()
}

// seen reports whether err is, or wraps, an error kept from a call of
// another agent than agentID, added after the first since failures. The
// chain is walked as failure.Walk walks it, bounded; a method of it that
// panics gives false.
func (r *recentFailures) seen(agentID string, err error, since uint64) (found bool) {
	if r.seq.Load() == since {
		return false // none since
	}
	var kept [maxRecentFailures]errPrint
	n := 0
	r.mu.Lock()
	for i := range maxRecentFailures {
		if r.seqs[i] > since && r.agents[i] != agentID {
			kept[n], n = r.errs[i], n+1
		}
	}
	r.mu.Unlock()
	defer func() {
		if recover() != nil {
			found = false
		}
	}()
	failure.Walk(err, func(e error) bool {
		for i := range n {
			if kept[i].is(e) {
				found = true
				break
			}
		}
		return !found
	})
	return found
}

// begun is what a call knows when fn starts: the config it runs under.
type begun struct {
	// w is the call's waits on the replication, once its load of a new
	// agent or a probe's claim started them, paused while fn runs (zero:
	// untouched; see waits).
	w       waits
	gen     uint64 // the config generation
	version int    // the config version
	key     uint64 // the agent's key of call IDs (see callKeys)
	arm     Arm
	probe   bool // a half-open circuit's probe
	// stalled: the latest attempt failed after its first-token deadline
	// cancelled it (see runWatched); idled, after its stream went silent
	// past the idle limit (RetryPolicy.StreamIdle); silent, after its own
	// deadline (Config.Timeout) did, while the call's context lived: an
	// attempt that got no answer in time (see runOnce).
	stalled, idled, silent bool
	// nests: the agent was seen to pass on the failures of other calls,
	// so that its calls need an attempt context (see callCtx).
	nests bool
	// hurry: the agent's last call answered only on the next route after
	// a transient failure of its own route: this call's first such
	// failure goes to the next route at once (see Loop.fallBack).
	hurry bool
	route string
	// homeProbe: the first attempt probes the primary (see ProbePolicy);
	// probeClass and probeText describe its failure.
	homeProbe  bool
	probeClass failure.Class
	probeText  string
	// id is the agent's ID; fellBack, that the call's last attempt ran
	// on the next route of its ladder (fellRoute) after a failure of
	// fellClass, with fellText (of fellCluster), on its own (fellFrom).
	id       string
	fellBack bool
	// fellSilent: its own route left the attempt without an answer;
	// fitted: the call runs off its agent's route for a reason of its
	// own: its request does not fit it (WithNeeds), or it cools down
	// (Loop.cooled); earlier: Record books it under an earlier version
	// (see call.earlier); skipped: its own route was known dead, and it
	// went to fellRoute without asking it. Beside fellBack, in its
	// padding.
	fellSilent, fitted, earlier, skipped bool
	fellClass                            failure.Class
	fellRoute                            string
	fellFrom                             string
	fellText                             string
	fellCluster                          uint64 // the cluster of fellText's failure
	// att is the call's attempt context, if it has one; seq, the
	// loop's recent failures when it started, without one (see
	// Loop.cause).
	att *callCtx
	seq uint64
	// q is what the call reported of itself (see scoreCtx).
	q quality
}
