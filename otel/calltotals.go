package otel

import (
	"cmp"
	"slices"
	"sync"

	si "github.com/self-improving-loop/selfimprove"
)

// callCounts are calls by outcome: success, failure, ignored.
type callCounts [3]int64

// countsOf returns a's calls by outcome.
func countsOf(a *si.AgentView) callCounts {
	return callCounts{a.Successes, a.Failures, a.Ignored}
}

// labelTotal is the running total of an agent attribute's series of
// selfimprove.calls, and the collection that last observed it.
type labelTotal struct {
	n    callCounts
	seen uint64
}

// callTotals keep selfimprove.calls monotonic. An agent's counts
// (AgentView.Successes, Failures, Ignored) start again from zero when it is
// evicted and loaded again, and _other's sum drops when an agent in it is
// evicted or gets a series of its own; a Counter read from them would go
// down, which backends take for a reset. Each collection instead adds to
// each series what its agents counted since the previous one (all of an
// agent's counts when they went down: it was loaded again), so a series
// counts the calls made in this process while its agent had it. Safe for
// concurrent collections.
type callTotals struct {
	mu    sync.Mutex
	seq   uint64                 // collections so far
	last  map[string]callCounts  // by agent ID: its counts at the latest collection
	next  map[string]callCounts  // the counts of the collection in progress
	total map[string]*labelTotal // by agent attribute
	keep  int                    // the totals kept of series not observed (evicted agents)
}

func newCallTotals(maxAgents int) *callTotals {
	return &callTotals{last: map[string]callCounts{}, next: map[string]callCounts{}, total: map[string]*labelTotal{}, keep: maxAgents}
}

// begin starts a collection; end ends it. The caller holds t.mu between.
func (t *callTotals) begin() {
	t.mu.Lock()
	t.seq++
}

// add books the counts of a (an agent in memory) to the series label, and
// returns the series' total.
func (t *callTotals) add(label string, a *si.AgentView) callCounts {
	cur, prev := countsOf(a), t.last[a.AgentID]
	t.next[a.AgentID] = cur
	lt := t.total[label]
	if lt == nil {
		lt = &labelTotal{}
		t.total[label] = lt
	}
	for k := range cur {
		if cur[k] >= prev[k] {
			lt.n[k] += cur[k] - prev[k]
		} else {
			lt.n[k] += cur[k] // loaded again since
		}
	}
	lt.seen = t.seq
	return lt.n
}

// end ends a collection: the agents not seen in it were evicted (their
// counts, when loaded again, start from zero), and the totals of the
// series least recently observed are forgotten beyond t.keep of them.
func (t *callTotals) end() {
	defer t.mu.Unlock()
	clear(t.last)
	t.last, t.next = t.next, t.last
	var absent []string
	for label, lt := range t.total {
		if lt.seen != t.seq && label != otherAgents {
			absent = append(absent, label)
		}
	}
	if len(absent) <= 2*t.keep {
		return
	}
	slices.SortFunc(absent, func(x, y string) int { return cmp.Compare(t.total[x].seen, t.total[y].seen) })
	for _, label := range absent[:len(absent)-t.keep] {
		delete(t.total, label)
	}
}
