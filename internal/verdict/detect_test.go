package verdict

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

func TestDetectBet(t *testing.T) {
	for _, c := range []struct {
		name          string
		mean, sd, m   float64
		want          float64
		approximately bool
	}{
		{"spread little: the cap", 0.85, 0.15, 0.793, MaxDetectBet, false},
		{"thumbs up and down", 0.85, math.Sqrt(0.85 * 0.15), 0.78, 2 * 0.07 * 0.22 / (0.85 * 0.15), true},
		{"scores that do not vary", 1, 0, 0.95, MaxDetectBet, false},
		{"m at 0", 0.04, 0.01, 0, 0, false},
		{"m negative", 0.04, 0.01, -0.02, 0, false},
		{"m at 1", 1, 0, 1, 0, false},
		{"m above the mean", 0.5, 0.2, 0.6, 0, false},
		{"NaN sd", 0.85, math.NaN(), 0.78, 0, false},
	} {
		got := DetectBet(c.mean, c.sd, c.m)
		if c.approximately && math.Abs(got-c.want) > 1e-12 || !c.approximately && got != c.want {
			t.Errorf("%s: DetectBet(%v, %v, %v) = %v, want %v", c.name, c.mean, c.sd, c.m, got, c.want)
		}
	}
}

func TestDetectStep(t *testing.T) {
	const m, f = 0.8, 0.5
	// One score: the log of its e-value 1 + f(m - x)/(1 - m).
	if got, want := DetectStep(1, 1, 0.4, 0.16, m, f), 1+math.Log1p(f*0.4/0.2); math.Abs(got-want) > 1e-12 {
		t.Errorf("a score of 0.4: %v, want %v", got, want)
	}
	// A score of 1 loses log(1 - f); at 0 or below, the run starts afresh.
	if got, want := DetectStep(1, 1, 1, 1, m, f), 1+math.Log(1-f); math.Abs(got-want) > 1e-12 {
		t.Errorf("a score of 1: %v, want %v", got, want)
	}
	if got := DetectStep(0.5, 1, 1, 1, m, f); got != 0 {
		t.Errorf("a score of 1 from 0.5: %v, want 0", got)
	}
	// Three scores at two points, one of them 1: their sums give the
	// exact sum of their log e-values.
	if got, want := DetectStep(2, 3, 1.8, 1.32, m, f), 2+2*math.Log1p(f*0.4/0.2)+math.Log(1-f); math.Abs(got-want) > 1e-9 {
		t.Errorf("scores 0.4, 0.4 and 1: %v, want %v", got, want)
	}
	for _, c := range []struct {
		name    string
		n       int
		s, q, m float64
		f       float64
	}{
		{"no score", 0, 0, 0, m, f},
		{"NaN sum", 1, math.NaN(), 0, m, f},
		{"NaN squares", 2, 1, math.NaN(), m, f},
		{"m 0", 1, 0, 0, 0, f},
		{"m 1", 1, 0, 0, 1, f},
		{"no bet", 1, 0, 0, m, 0},
		{"bet all", 1, 0, 0, m, 1},
	} {
		if got := DetectStep(1.5, c.n, c.s, c.q, c.m, c.f); got != 1.5 {
			t.Errorf("%s: %v, want the statistic unchanged (1.5)", c.name, got)
		}
	}
	if got := DetectLimit(0.001); math.Abs(got-math.Log(1000)) > 1e-12 {
		t.Errorf("DetectLimit(0.001) = %v", got)
	}
	if got := DetectLimit(0); !math.IsInf(got, 1) {
		t.Errorf("DetectLimit(0) = %v, want +Inf", got)
	}
}

// TestDetectSum: scores summed elsewhere bring at most the sum of their
// log e-values, exactly that for one score or two.
func TestDetectSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 41))
	for i := range 3000 {
		n := 1 + r.IntN(12)
		m, f := 0.05+0.9*r.Float64(), 0.95*r.Float64()
		var s, q, exact float64
		for range n {
			x := r.Float64()
			if i%3 == 0 {
				x = float64(r.IntN(2)) // thumbs up and down
			}
			s, q = s+x, q+x*x
			exact += math.Log1p(f * (m - x) / (1 - m))
		}
		got := detectSum(n, s, q, m, f)
		if n <= 2 && math.Abs(got-exact) > 1e-9 || got > exact+1e-9 {
			t.Fatalf("%d scores (m %v, f %v): %v, their sum %v", n, m, f, got, exact)
		}
	}
}

// detectRun feeds scores drawn by draw to the detection at the bet of
// the established scores (mean, sd) against m, from the statistic 0, and
// returns how many it took to reach limit (at most max).
func detectRun(draw func() float64, mean, sd, m, limit float64, most int) int {
	f := DetectBet(mean, sd, m)
	w := 0.0
	for n := 1; n <= most; n++ {
		x := draw()
		if w = DetectStep(w, 1, x, x*x, m, f); w >= limit {
			return n
		}
	}
	return most
}

// TestDetectAverageRunLength: while the mean is exactly m (the worst
// case: scores of 0 and 1, the largest bet), the detection at α = 1/100
// reports a fall after 100 scores on average at the soonest.
func TestDetectAverageRunLength(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 41))
	const m, trials = 0.7, 2000
	bernoulli := func() float64 {
		if r.Float64() < m {
			return 1
		}
		return 0
	}
	total := 0
	for range trials {
		// A bet as large as the established scores allow: no spread.
		total += detectRun(bernoulli, 1, 0, m, DetectLimit(0.01), 100_000)
	}
	if arl := float64(total) / trials; arl < 100 {
		t.Errorf("average run length %.1f scores at α = 1/100, want at least 100", arl)
	}
}

// TestDetectFall: the fall of issue 41 (mean 0.85 → 0.60, σ 0.15, 500
// established scores) is seen after at most 15 scores in the median at
// the loop's limit (α = 1/1,000); the mixture of LogWealth the watch used
// before took 39.
func TestDetectFall(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 41))
	sd := 0.15
	m := 0.85 - sd/math.Sqrt(500) - 0.05
	var at []int
	for range 1000 {
		at = append(at, detectRun(func() float64 { return scoresim.Beta(r, 0.60, sd) }, 0.85, sd, m, DetectLimit(0.001), 1000))
	}
	slices.Sort(at)
	if med := at[len(at)/2]; med > 15 {
		t.Errorf("median %d scores to see the fall, want at most 15", med)
	}
}
