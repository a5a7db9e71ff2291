package scoresim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBetaMoments: 200,000 draws have the mean and standard deviation
// asked for, within sampling error, and stay in [0, 1] (a draw of a
// small shape can round to an end).
func TestBetaMoments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ m, sd float64 }{{0.85, 0.25}, {0.6, 0.25}, {0.5, 0.1}} {
		const n = 200_000
		var sum, sq float64
		for range n {
			x := Beta(r, c.m, c.sd)
			if !(x >= 0 && x <= 1) {
				t.Fatalf("Beta(%v, %v) drew %v", c.m, c.sd, x)
			}
			sum, sq = sum+x, sq+x*x
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		if math.Abs(mean-c.m) > 0.005 || math.Abs(sd-c.sd) > 0.005 {
			t.Errorf("Beta(%v, %v): mean %.4f, sd %.4f", c.m, c.sd, mean, sd)
		}
	}
}

// The Wilson interval of 0 of 20 is [0, 16.1 %], of 10 of 20 [29.9, 70.1 %].
func TestWilson95(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{{0, 20, 0, 0.1611}, {10, 20, 0.2993, 0.7007}, {20, 20, 0.8389, 1}} {
		lo, hi := Wilson95(c.k, c.n)
		if math.Abs(lo-c.lo) > 1e-4 || math.Abs(hi-c.hi) > 1e-4 {
			t.Errorf("Wilson95(%d, %d) = [%.4f, %.4f], want [%.4f, %.4f]", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
}
