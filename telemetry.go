package selfimprove

import (
	"runtime"
	"sync/atomic"
	"time"
)

// latencyBounds are the upper bounds of the latency histogram's buckets
// (see LatencyBuckets); a last bucket counts the calls above them.
var latencyBounds = [...]time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

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

// latencyBucket is the index of d's bucket in a latency histogram.
func latencyBucket(d time.Duration) int {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	return i
}

// Histogram is a latency histogram: Counts[i] counts the calls that took
// at most Bounds[i] and more than Bounds[i-1]; the last count, those
// longer than the last bound. Bounds are LatencyBuckets.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	// Count is the sum of Counts; Sum the sum of the calls' durations.
	Count uint64
	Sum   time.Duration
}

// Circuit is the state of an agent's circuit breaker.
type Circuit string

// The circuit states (see CircuitBreaker).
const (
	CircuitClosed   Circuit = "closed"    // calls run
	CircuitOpen     Circuit = "open"      // calls fail fast
	CircuitHalfOpen Circuit = "half_open" // the next call is a probe
)

// counters reads a's counters into v, without the lock.
func (a *agent) counters(v *AgentView) {
	t := a.tel
	v.FirstToken = t.firstTokens()
	v.Failures, v.Ignored = t.failures.Load(), t.ignored.Load()
	for {
		s := t.seq.Load()
		if s&1 == 0 {
			h := Histogram{Bounds: LatencyBuckets(), Counts: make([]uint64, len(t.buckets))}
			for i := range t.buckets {
				h.Counts[i] = t.buckets[i].Load()
			}
			h.Sum = time.Duration(t.sum.Load())
			ok := t.successes.Load()
			// The counts not yet settled.
			var pc [len(latencyBounds) + 1]uint64
			var pl int64
			a.fast.collect(&t.live, &pc, &pl, false)
			if t.seq.Load() == s {
				for i := range h.Counts {
					h.Counts[i] += pc[i]
					h.Count += h.Counts[i]
					ok += int64(pc[i])
				}
				h.Sum += time.Duration(pl)
				v.Successes, v.Latency = ok, h
				return
			}
		}
		runtime.Gosched() // a settle is moving the counts
	}
}
