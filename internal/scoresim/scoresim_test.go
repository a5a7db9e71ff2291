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
