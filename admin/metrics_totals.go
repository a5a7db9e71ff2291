package admin

import (
	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/calltotals"
)

// The counters of an agent that /metrics keeps monotonic (calltotals), in
// this order: its calls by outcome (success, failure, ignored), then its
// Latency and FirstToken histograms, each as its bucket counts (not
// cumulative: the last one above the highest bound), its count and its
// sum in nanoseconds.
var (
	latencyBounds = selfimprove.LatencyBuckets()
	histWidth     = len(latencyBounds) + 3 // buckets, +Inf, count, sum
	latencyAt     = 3
	firstTokenAt  = latencyAt + histWidth
	countersWidth = firstTokenAt + histWidth
)

// newTotals returns the running totals of /metrics' per-agent counters.
func newTotals() *calltotals.Totals {
	return calltotals.New(countersWidth)
}

// counters writes m's counters into v (countersWidth of them).
func counters(v []int64, m *selfimprove.AgentView) {
	v[0], v[1], v[2] = m.Successes, m.Failures, m.Ignored
	histCounters(v[latencyAt:firstTokenAt], &m.Latency)
	histCounters(v[firstTokenAt:], &m.FirstToken)
}

// histCounters writes h's counts into v (histWidth of them; h may have
// none: an agent with no time to first token).
func histCounters(v []int64, h *selfimprove.Histogram) {
	n := len(latencyBounds) + 1
	clear(v[:n])
	for i, c := range h.Counts {
		v[min(i, n-1)] += int64(c)
	}
	v[n], v[n+1] = int64(h.Count), int64(h.Sum)
}
