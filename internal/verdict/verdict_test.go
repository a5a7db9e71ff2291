package verdict

import (
	"math"
	"testing"
)

// near reports whether got is within a relative tol of want (or both are
// NaN, or equal).
func near(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return got == want || math.Abs(got-want) <= tol*math.Abs(want)
}

func TestSmoothed(t *testing.T) {
	for _, c := range []struct {
		k, n int
		want float64
	}{
		{0, 0, 0.5}, // no calls: even
		{0, 1, 0.25},
		{1, 1, 0.75},
		{9, 10, 9.5 / 11},
		{0, 1000, 0.5 / 1001}, // never 0
		{1000, 1000, 1000.5 / 1001},
	} {
		if got := Smoothed(c.k, c.n); got != c.want {
			t.Errorf("Smoothed(%d, %d) = %v, want %v", c.k, c.n, got, c.want)
		}
	}
}

func TestClampRate(t *testing.T) {
	for _, c := range []struct{ r, want float64 }{
		{-1, 0.01}, {0, 0.01}, {0.01, 0.01}, {0.5, 0.5}, {0.99, 0.99}, {1, 0.99}, {2, 0.99},
		{math.Inf(1), 0.99}, {math.Inf(-1), 0.01}, {math.NaN(), math.NaN()},
	} {
		if got := ClampRate(c.r); !near(got, c.want, 0) {
			t.Errorf("ClampRate(%v) = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	for _, c := range []struct {
		name         string
		s, n         int
		k, r         float64
		wantP, wantM float64
	}{
		{"no calls: even", 0, 0, 0, 0, 0.5, 1},
		{"all succeed", 10, 10, 0, 0, 10.5 / 11, 11},
		{"all fail", 0, 10, 0, 0, 0.5 / 11, 11},
		{"clamped high", 1000, 1000, 0, 0, 0.99, 1001},
		{"clamped low", 0, 1000, 0, 0, 0.01, 1001},
		{"prior completes a short count", 4, 4, 6, 0.5, (4.5 + 3) / 11, 11},
		{"prior's weight counts in m", 14, 16, 4, 0.9, (14.5 + 3.6) / 21, 21},
		{"prior alone", 0, 0, 10, 0.8, (0.5 + 8) / 11, 11},
	} {
		p, m := Estimate(c.s, c.n, c.k, c.r)
		if !near(p, c.wantP, 1e-15) || m != c.wantM {
			t.Errorf("%s: Estimate(%d, %d, %v, %v) = %v, %v, want %v, %v", c.name, c.s, c.n, c.k, c.r, p, m, c.wantP, c.wantM)
		}
	}
}

func TestWithinZ(t *testing.T) {
	for _, c := range []struct {
		name   string
		r, ref float64
		n      int
		z      float64
		want   bool
	}{
		{"equal", 0.9, 0.9, 16, 3, true},
		{"no calls: anything is within", 0, 0.9, 0, 3, true},
		// 16 calls at 0.9: one standard error is 0.075.
		{"within three errors", 0.7, 0.9, 16, 3, true},
		{"beyond three errors", 0.6, 0.9, 16, 3, false},
		{"above counts the same", 1, 0.8, 16, 3, true},
		// A reference of 0 or 1 keeps a variance floor of 0.01: 3·0.1/4.
		{"floor at ref 1: within", 0.93, 1, 16, 3, true},
		{"floor at ref 1: beyond", 0.92, 1, 16, 3, false},
		{"floor at ref 0", 0.07, 0, 16, 3, true},
	} {
		if got := WithinZ(c.r, c.ref, c.n, c.z); got != c.want {
			t.Errorf("%s: WithinZ(%v, %v, %d, %v) = %v, want %v", c.name, c.r, c.ref, c.n, c.z, got, c.want)
		}
	}
}

func TestZScore(t *testing.T) {
	for _, c := range []struct {
		bn, bf, an, af int
		want           float64
	}{
		{100, 10, 100, 40, 5.170238199043427},
		{20, 0, 20, 10, 4.174612064864972},
		{0, 0, 0, 0, 0},                      // no calls on either side
		{50, 5, 50, 5, 0},                    // the same counts
		{10, 10, 10, 0, -10.235326314383181}, // after is the better
	} {
		got := ZScore(c.bn, c.bf, c.an, c.af)
		if !near(got, c.want, 1e-12) {
			t.Errorf("ZScore(%d, %d, %d, %d) = %v, want %v", c.bn, c.bf, c.an, c.af, got, c.want)
		}
		if back := ZScore(c.an, c.af, c.bn, c.bf); back != -got {
			t.Errorf("ZScore(%d, %d, %d, %d) = %v, not the opposite of %v", c.an, c.af, c.bn, c.bf, back, got)
		}
	}
}

func TestGainScore(t *testing.T) {
	for _, c := range []struct {
		bn, bf, an, af int
		want           float64
	}{
		{16, 8, 30, 3, 4.310527248642598}, // a fix: 50 % → 90 %
		{100, 10, 100, 10, 0},
		{0, 0, 10, 0, 3.0151134457776365},  // no calls before: an even rate
		{16, 2, 16, 8, -4.108863422004879}, // a loss
	} {
		if got := GainScore(c.bn, c.bf, c.an, c.af); !near(got, c.want, 1e-12) {
			t.Errorf("GainScore(%d, %d, %d, %d) = %v, want %v", c.bn, c.bf, c.an, c.af, got, c.want)
		}
	}
}

func TestRunLength(t *testing.T) {
	for _, c := range []struct {
		q, odds float64
		want    int
	}{
		{0.2, 0.001, 5},    // 0.2^4 = 0.0016, 0.2^5 = 0.00032
		{0.3, 0.001, 6},    // 0.3^5 = 0.0024, 0.3^6 = 0.00073
		{0.5, 0.001, 10},   // 2^-10 < 0.001 < 2^-9
		{0.01, 0.001, 2},   // one failure is not rare enough
		{1e-300, 0.001, 1}, // one is
		{0.9, 0.001, 66},
		// Out of range.
		{0, 0.001, 1},
		{-0.5, 0.001, 1},
		{0.5, 1, 1},
		{0.5, 2, 1},
		{1, 0.001, math.MaxInt},
		{1.5, 0.001, math.MaxInt},
		{math.NaN(), 0.001, math.MaxInt},
		{0.5, 0, math.MaxInt},
		{0.5, math.NaN(), math.MaxInt},
	} {
		if got := RunLength(c.q, c.odds); got != c.want {
			t.Errorf("RunLength(%v, %v) = %d, want %d", c.q, c.odds, got, c.want)
		}
	}
	// Just below 1, the run is long but still counted.
	if n := RunLength(math.Nextafter(1, 0), math.SmallestNonzeroFloat64); n < 1e18 {
		t.Errorf("RunLength(1−ε, smallest odds) = %d, want above 1e18", n)
	}
	// The run is the shortest that rare, to within rounding.
	for q := 0.01; q < 1; q += 0.01 {
		for _, odds := range []float64{0.1, 0.01, 0.001, 1e-6} {
			n := RunLength(q, odds)
			if math.Pow(q, float64(n)) > odds*(1+1e-12) || n > 1 && math.Pow(q, float64(n-1)) <= odds*(1-1e-12) {
				t.Errorf("RunLength(%v, %v) = %d: q^n = %v, q^(n-1) = %v", q, odds, n, math.Pow(q, float64(n)), math.Pow(q, float64(n-1)))
			}
		}
	}
}
