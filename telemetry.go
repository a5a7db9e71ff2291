package selfimprove

import (
	"sync/atomic"
	"time"
)

// LatencyBuckets returns the upper bounds of the buckets of
// AgentView.Latency, shortest first: 5 ms to 1 minute (13 bounds).
// AgentView.Latency.Counts has one more entry, for the calls longer
// than the last bound.
func LatencyBuckets() []time.Duration { return append([]time.Duration(nil), latencyBounds[:]...) }

// telemetry counts an agent's calls since it was loaded in this process.
// Its fields are updated atomically, so that it is read without the
// agent's lock.
type telemetry struct {
	successes, failures, ignored atomic.Int64
	buckets                      [len(latencyBounds) + 1]atomic.Uint64
	sum                          atomic.Int64 // ns, of the counted calls
	// live are the agent's counters of successes booked without the lock
	// (see fast.go), not yet settled into the fields above. seq is odd
	// while a settle moves counts from them to those, so that a reader
	// retries.
	live fastHist
	seq  atomic.Uint64
	// first and firstSum are the histogram of the calls' times to first
	// token (see AgentView.FirstToken), and their sum in ns.
	first    [len(latencyBounds) + 1]atomic.Uint64
	firstSum atomic.Int64
}

// observeFirstToken counts one call's time to first token, d. It takes
// no lock and allocates nothing.
func (t *telemetry) observeFirstToken(d time.Duration) {
	t.first[latencyBucket(d)].Add(1)
	t.firstSum.Add(int64(d))
}

// firstTokens returns the histogram of the times to first token: the
// zero Histogram, allocating nothing, when there are none.
func (t *telemetry) firstTokens() Histogram {
	var counts [len(latencyBounds) + 1]uint64
	var n uint64
	for i := range t.first {
		counts[i] = t.first[i].Load()
		n += counts[i]
	}
	if n == 0 {
		return Histogram{}
	}
	return Histogram{Bounds: LatencyBuckets(), Counts: counts[:], Count: n, Sum: time.Duration(t.firstSum.Load())}
}

// observeLatency counts one finished call of the agent: its outcome and,
// for a counted call, its duration. It allocates nothing.
func (t *telemetry) observeLatency(d time.Duration, failed, ignored bool) {
	switch {
	case ignored:
		t.ignored.Add(1)
		return
	case failed:
		t.failures.Add(1)
	default:
		t.successes.Add(1)
	}
	t.buckets[latencyBucket(d)].Add(1)
	t.sum.Add(int64(d))
}

// The circuit states (see CircuitBreaker).
const (
	CircuitClosed   Circuit = "closed"    // calls run
	CircuitOpen     Circuit = "open"      // calls fail fast
	CircuitHalfOpen Circuit = "half_open" // the next call is a probe
)
