// Package calltotals keeps the per-agent counters that /metrics (package
// admin) and selfimprove.calls (package otel) export monotonic, though
// they are read from an agent's own counts, which start again from zero
// when the agent is evicted and loaded again.
package calltotals

import (
	"cmp"
	"slices"
	"strings"
	"sync"
)

// Other is the label of the series that sums the agents beyond the cap on
// per-agent series. Its totals are never forgotten.
const Other = "_other"

// labelTotal is the running total of one series, and the collection that
// last observed it.
type labelTotal struct {
	n    []int64
	seen uint64
}

// Totals keep counters read from agents monotonic. An agent's counts
// (AgentView.Successes, Failures, Ignored, its histograms) start again from
// zero when it is evicted and loaded again, and _other's sum drops when an
// agent in it is evicted; a counter read from them would go down, which
// Prometheus and OpenTelemetry backends take for a reset (a false rate).
// Each collection instead adds to each series what its agents counted
// since the previous one (all of an agent's counts when any of them went
// down: it was loaded again), so a series counts what was counted in this
// process while its agent had it. The calls of an agent loaded and evicted
// between two collections are not seen. A series no agent added to in a
// collection (its agent evicted) keeps its total for as long as Absent
// has room for it. Safe for concurrent collections: Begin to End holds a
// lock.
type Totals struct {
	mu    sync.Mutex
	width int                    // counters an agent
	seq   uint64                 // collections so far
	last  map[string][]int64     // by agent ID: its counts at the latest collection
	next  map[string][]int64     // the counts of the collection in progress
	total map[string]*labelTotal // by series label
}

// New returns the running totals of series of width counters each.
func New(width int) *Totals {
	return &Totals{width: width, last: map[string][]int64{}, next: map[string][]int64{}, total: map[string]*labelTotal{}}
}

// Begin starts a collection, End ends it; between, the caller holds t's
// lock, reads the agents' counts (under the lock: counts read before
// another collection booked its own would look lower, as after a reload,
// and be counted again) and calls Add for each agent in memory.
func (t *Totals) Begin() {
	t.mu.Lock()
	t.seq++
}

// Add books cur, the counts of the agent id (t's width of them), to the
// series label, and returns the series' running totals: t's own slice,
// which the caller reads before End and must not modify.
func (t *Totals) Add(label, id string, cur []int64) []int64 {
	prev, ok := t.last[id]
	if !ok {
		prev = make([]int64, t.width)
	}
	lt := t.total[label]
	if lt == nil {
		lt = &labelTotal{n: make([]int64, t.width)}
		t.total[label] = lt
	}
	reloaded := false
	for k := range t.width {
		reloaded = reloaded || cur[k] < prev[k]
	}
	for k := range t.width {
		if reloaded {
			lt.n[k] += cur[k]
		} else {
			lt.n[k] += cur[k] - prev[k]
		}
	}
	copy(prev, cur) // the slice moves from last to next: no allocation
	t.next[id] = prev
	lt.seen = t.seq
	return lt.n
}

// Absent passes to observe (if not nil) the series no agent added to in
// this collection, with their totals: _other, and of the others the room
// most recently added to; it forgets the rest, whose series start again
// from zero. Call it after the collection's Adds. OpenTelemetry's delta
// temporality forgets a series a collection leaves out and would take its
// next value whole for new calls, so an exporter observes each series it
// remembers in every collection (otel); a Prometheus scrape may leave
// them out (admin: observe nil).
func (t *Totals) Absent(room int, observe func(label string, n []int64)) {
	var labels []string
	for label, lt := range t.total {
		switch {
		case lt.seen == t.seq:
		case label == Other:
			if observe != nil {
				observe(label, lt.n)
			}
		default:
			labels = append(labels, label)
		}
	}
	room = max(room, 0)
	if len(labels) > room {
		slices.SortFunc(labels, func(x, y string) int {
			return cmp.Or(cmp.Compare(t.total[y].seen, t.total[x].seen), strings.Compare(x, y))
		})
		for _, label := range labels[room:] {
			delete(t.total, label)
		}
		labels = labels[:room]
	}
	if observe != nil {
		for _, label := range labels {
			observe(label, t.total[label].n)
		}
	}
}

// End ends a collection: the agents not seen in it were evicted (their
// counts, when loaded again, start from zero).
func (t *Totals) End() {
	defer t.mu.Unlock()
	clear(t.last)
	t.last, t.next = t.next, t.last
}
