package admin

import (
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// hist is a histogram over selfimprove.LatencyBuckets with counts by
// bucket index and the durations' sum.
func hist(counts map[int]uint64, sum time.Duration) selfimprove.Histogram {
	b := selfimprove.LatencyBuckets() // 5, 10, 25, 50, 100, 250 ms, …
	x := selfimprove.Histogram{Bounds: b, Counts: make([]uint64, len(b)+1), Sum: sum}
	for i, c := range counts {
		x.Counts[i] = c
		x.Count += c
	}
	return x
}

// TestQuantileInterpolated: a quantile is interpolated inside its bucket
// (the calls spread evenly over it), not the bucket's upper bound, so
// that two agents in one bucket show different figures.
func TestQuantileInterpolated(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		h    selfimprove.Histogram
		q    float64
		want time.Duration
	}{
		// Sums of calls spread evenly over their buckets: the whole span.
		{"p50 of 100 calls in (100, 250] ms", hist(map[int]uint64{5: 100}, 100*175*ms), 0.5, 175 * ms},
		{"p95 of 100 calls in (100, 250] ms", hist(map[int]uint64{5: 100}, 100*175*ms), 0.95, 2425 * ms / 10},
		{"p95 of 90 in (0, 5] and 10 in (5, 10] ms", hist(map[int]uint64{0: 90, 1: 10}, 90*2500*time.Microsecond+10*7500*time.Microsecond), 0.95, 7500 * time.Microsecond},
		{"p50 of 90 in (0, 5] and 10 in (5, 10] ms", hist(map[int]uint64{0: 90, 1: 10}, 90*2500*time.Microsecond+10*7500*time.Microsecond), 0.5, 2777778}, // 50/90 of 5 ms, rounded
		{"p95 beyond every bound: the last bound", hist(map[int]uint64{14 - 1: 10}, 10*2*time.Minute), 0.95, time.Minute},
		{"no calls", hist(nil, 0), 0.95, 0},
	} {
		if got := quantile(c.h, c.q); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestQuantileWithinObserved: a quantile stays within what the calls'
// durations allow: 100 calls of 3 µs (all in the first bucket, up to
// 5 ms) give a p95 of a few µs, not 4.75 ms (0.95 of the bucket); calls
// of 110 ms in (100, 250] ms, a p95 near 110 ms, not 242.5 ms.
func TestQuantileWithinObserved(t *testing.T) {
	us, ms := time.Microsecond, time.Millisecond
	for _, c := range []struct {
		name string
		h    selfimprove.Histogram
		q    float64
		want time.Duration
	}{
		{"p95 of 100 calls of 3 µs", hist(map[int]uint64{0: 100}, 100*3*us), 0.95, 5700 * time.Nanosecond}, // 0.95 of 2×3 µs
		{"p50 of 100 calls of 3 µs", hist(map[int]uint64{0: 100}, 100*3*us), 0.5, 3 * us},
		{"p95 of 100 calls of 110 ms", hist(map[int]uint64{5: 100}, 100*110*ms), 0.95, 119 * ms},
		// The other buckets' calls took at least their lower bounds: 10
		// calls of 6 ms leave the 90 of 3 µs at most 10.27 ms in all.
		{"p95 of 90 calls of 3 µs and 10 of 6 ms", hist(map[int]uint64{0: 90, 1: 10}, 90*3*us+10*6*ms), 0.95, 6027 * us},
		{"p50 of 90 calls of 3 µs and 10 of 6 ms", hist(map[int]uint64{0: 90, 1: 10}, 90*3*us+10*6*ms), 0.5, 126790 * time.Nanosecond},
		{"calls of no duration", hist(map[int]uint64{0: 10}, 0), 0.95, 0},
	} {
		got := quantile(c.h, c.q)
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
