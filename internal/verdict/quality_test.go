package verdict

import (
	"math"
	"testing"
)

func TestBelowMean(t *testing.T) {
	// n scores all equal to x: sum n·x, squares n·x².
	same := func(n int, x float64) (int, float64, float64) { return n, float64(n) * x, float64(n) * x * x }
	tests := []struct {
		name  string
		n     int
		s, q  float64
		m     float64
		alpha float64
		want  bool
	}{
		{"no scores", 0, 0, 0, 0.9, 0.05, false},
		{"reference 0: no mean is below", 10, 0, 0, 0, 0.05, false},
		{"at the reference", 50, 45, 45 * 0.9, 0.9, 0.05, false},
		{"above the reference", 50, 50, 50, 0.9, 0.05, false},
		{"one zero is not enough", 1, 0, 0, 0.9, 0.05, false},
		{"ten zeros against 0.9", 10, 0, 0, 0.9, 0.05, true},
		{"alpha out of range", 10, 0, 0, 0.9, 0, false},
		{"NaN sum", 10, math.NaN(), 0, 0.9, 0.05, false},
	}
	for _, tt := range tests {
		if got := BelowMean(tt.n, tt.s, tt.q, tt.m, tt.alpha); got != tt.want {
			t.Errorf("%s: BelowMean = %v, want %v (log wealth %v)", tt.name, got, tt.want, LogWealth(tt.n, tt.s, tt.q, tt.m))
		}
	}
	// 0.6 against 0.9 is found in fewer scores than 0.8 against 0.9.
	first := func(x float64) int {
		for n := 1; n < 1000; n++ {
			if k, s, q := same(n, x); BelowMean(k, s, q, 0.9, 0.03) {
				return n
			}
		}
		return 1000
	}
	if a, b := first(0.6), first(0.8); !(a < b && b < 1000) {
		t.Errorf("scores of 0.6 found after %d, of 0.8 after %d", a, b)
	}
	if n, s, q := same(40, 1); !AboveMean(n, s, q, 0.8, 0.03) || AboveMean(n, 0.8*40, 0.64*40, 0.8, 0.03) {
		t.Error("AboveMean: 40 ones are above 0.8, 40 scores of 0.8 are not")
	}
}

// TestBelowMeanLevel: under the hypothesis (scores of mean m, here the
// extreme Bernoulli case), the test looked at after every one of 500
// scores rejects in at most alpha of runs.
func TestBelowMeanLevel(t *testing.T) {
	const runs, alpha, m = 2000, 0.05, 0.8
	seed := uint64(1)
	rejected := 0
	for range runs {
		var s float64
		for n := 1; n <= 500; n++ {
			seed = seed*6364136223846793005 + 1442695040888963407
			if float64(seed>>11)/(1<<53) < m {
				s++
			}
			if BelowMean(n, s, s, m, alpha) {
				rejected++
				break
			}
		}
	}
	if r := float64(rejected) / runs; r > alpha {
		t.Errorf("rejected %.3f of runs at the hypothesis, more than alpha %v", r, alpha)
	}
}
