// Package scoresim draws quality scores for simulations: beta-distributed
// scores of a given mean and standard deviation, as the quality tests and
// the verification simulation of scored calls use them.
package scoresim

import (
	"math"
	"math/rand/v2"
)

// Beta draws a score in [0, 1] of mean m and standard deviation sd from a
// beta law; sd must be below sqrt(m(1-m)).
func Beta(r *rand.Rand, m, sd float64) float64 {
	k := m*(1-m)/(sd*sd) - 1
	x, y := gamma(r, m*k), gamma(r, (1-m)*k)
	return x / (x + y)
}

// gamma draws from Gamma(a, 1) (Marsaglia & Tsang).
func gamma(r *rand.Rand, a float64) float64 {
	if a < 1 {
		return gamma(r, a+1) * math.Pow(r.Float64(), 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		if math.Log(r.Float64()) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// Wilson95 returns the 95 % Wilson interval of a proportion of k in n, as
// the simulations report their shares.
func Wilson95(k, n int) (lo, hi float64) {
	const z = 1.96
	p, fn := float64(k)/float64(n), float64(n)
	c := (p + z*z/(2*fn)) / (1 + z*z/fn)
	h := z / (1 + z*z/fn) * math.Sqrt(p*(1-p)/fn+z*z/(4*fn*fn))
	return max(c-h, 0), min(c+h, 1)
}
