package verdict

import "math"

// BinomTail is P(X ≥ k) for X ~ Binomial(n, q), 0 < q < 1: 1 for k ≤ 0,
// 0 for k > n. It sums the probabilities of 0..n, each from the one before
// by the ratio of consecutive terms, and allocates nothing. It is meant for
// the short runs of calls the policy keeps: the first term, (1−q)^n,
// underflows to 0 for long ones (n above 1,074 at q = ½), and so does the
// tail.
func BinomTail(n, k int, q float64) float64 {
	if k <= 0 {
		return 1
	}
	p, pm := 0.0, math.Pow(1-q, float64(n))
	for i := 0; i <= n; i++ {
		if i >= k {
			p += pm
		}
		pm *= float64(n-i) / float64(i+1) * q / (1 - q)
	}
	return min(p, 1)
}

// Consistent reports whether f failures out of n calls are within reach
// of the failure rate q (0 < q < 1): at that rate, as many failures or
// more, and as many successes or more, each have a chance above odds.
func Consistent(n, f int, q, odds float64) bool {
	return BinomTail(n, f, q) > odds && BinomTail(n, n-f, 1-q) > odds
}

// PredictiveTail is P(F ≥ f) for the failures F of n calls whose failure
// rate is Beta(fa, sb) distributed (fa and sb positive): the upper tail
// of the beta-binomial distribution, the predictive distribution of the
// failures of n calls when the failure rate is known from a reference of
// fa failures and sb successes. It is 1 for f ≤ 0 and 0 for f > n. It sums
// the probabilities of f..n, the first from log-gamma functions and each
// next one by the ratio of consecutive terms, and allocates nothing.
func PredictiveTail(n, f int, fa, sb float64) float64 {
	switch {
	case f <= 0:
		return 1
	case f > n:
		return 0
	}
	fn, ff := float64(n), float64(f)
	lp := lgamma(fn+1) - lgamma(ff+1) - lgamma(fn-ff+1) +
		lgamma(ff+fa) + lgamma(fn-ff+sb) - lgamma(fn+fa+sb) -
		(lgamma(fa) + lgamma(sb) - lgamma(fa+sb))
	pm, sum := math.Exp(lp), 0.0
	for k := f; k <= n; k++ {
		sum += pm
		if k < n {
			fk := float64(k)
			pm *= (fn - fk) / (fk + 1) * (fk + fa) / (fn - fk - 1 + sb)
		}
	}
	return min(sum, 1)
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}
