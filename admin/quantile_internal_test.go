package admin

import (
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// TestQuantileInterpolated: a quantile is interpolated inside its bucket
// (the calls spread evenly over it), not the bucket's upper bound, so
// that two agents in one bucket show different figures.
func TestQuantileInterpolated(t *testing.T) {
	b := selfimprove.LatencyBuckets() // 5, 10, 25, 50, 100, 250 ms, …
	h := func(counts map[int]uint64) selfimprove.Histogram {
		x := selfimprove.Histogram{Bounds: b, Counts: make([]uint64, len(b)+1)}
		for i, c := range counts {
			x.Counts[i] = c
			x.Count += c
		}
		return x
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		h    selfimprove.Histogram
		q    float64
		want time.Duration
	}{
		{"p50 of 100 calls in (100, 250] ms", h(map[int]uint64{5: 100}), 0.5, 175 * ms},
		{"p95 of 100 calls in (100, 250] ms", h(map[int]uint64{5: 100}), 0.95, 2425 * ms / 10},
		{"p95 of 90 in (0, 5] and 10 in (5, 10] ms", h(map[int]uint64{0: 90, 1: 10}), 0.95, 7500 * time.Microsecond},
		{"p50 of 90 in (0, 5] and 10 in (5, 10] ms", h(map[int]uint64{0: 90, 1: 10}), 0.5, 2777778}, // 50/90 of 5 ms, rounded
		{"p95 beyond every bound: the last bound", h(map[int]uint64{len(b): 10}), 0.95, time.Minute},
		{"no calls", h(nil), 0.95, 0},
	} {
		if got := quantile(c.h, c.q); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
