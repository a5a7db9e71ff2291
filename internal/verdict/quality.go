package verdict

import "math"

// The quality tests: anytime-valid tests of the mean of scores in [0, 1],
// by betting (Waudby-Smith & Ramdas 2023, "Estimating means of bounded
// random variables by betting", JRSS B). To test "the mean is at least
// m", a gambler bets a fraction λ of her wealth, at each score X, on
// ξ = c(m - X), which has mean at most 0 when the hypothesis holds and is
// at least -1 (c = 1/(1-m), capped). By Fan, Grama & Liu (2015),
// exp(λξ - ψ(λ)ξ²) ≤ 1 + λξ for ξ ≥ -1 and λ in [0, 1), with
// ψ(λ) = -log(1-λ) - λ: so exp(λΣξ - ψ(λ)Σξ²) is a non-negative
// supermartingale under the hypothesis, the empirical-Bernstein capital
// process of Howard et al. (2021), and, unlike the full betting capital,
// a function of the sums of the scores and of their squares alone. The
// average of such processes over a grid of bets is one too, and by
// Ville's inequality it ever reaches 1/α with probability at most α,
// however often it is looked at.

// betGrid are the bets λ mixed, with equal weights.
var betGrid = [...]float64{0.05, 0.1, 0.2, 0.35, 0.6}

// maxBetScale caps c, the scale of a bet, for a mean m near 1.
const maxBetScale = 20

// BelowMean reports whether n scores in [0, 1], of sum s and sum of
// squares q, show at level alpha that their mean is below m: the chance
// that it ever reports true, looked at after every score, is at most
// alpha while the mean is at least m. It is false for n 0, m ≤ 0 and an
// alpha outside (0, 1).
func BelowMean(n int, s, q, m, alpha float64) bool {
	return LogWealth(n, s, q, m) >= math.Log(1/alpha) && alpha > 0 && alpha < 1
}

// AboveMean reports whether the scores show at level alpha that their
// mean is above m: BelowMean of the scores 1-X against 1-m.
func AboveMean(n int, s, q, m, alpha float64) bool {
	fn := float64(n)
	return BelowMean(n, fn-s, fn-2*s+q, 1-m, alpha)
}

// LogWealth is the logarithm of the mixed capital of the bets against
// "the mean of the n scores of sum s and sum of squares q is at least
// m"; 0 when there is no bet to make.
func LogWealth(n int, s, q, m float64) float64 {
	if n <= 0 || !(m > 0) || math.IsNaN(s) || math.IsNaN(q) {
		return 0
	}
	m = min(m, 1)
	c := float64(maxBetScale)
	if m < 1 {
		c = min(1/(1-m), maxBetScale)
	}
	fn := float64(n)
	s1 := c * (fn*m - s)
	s2 := max(c*c*(fn*m*m-2*m*s+q), 0)
	// log of the mean of exp(λ_j s1 - ψ(λ_j) s2), computed stably.
	var logs [len(betGrid)]float64
	top := math.Inf(-1)
	for i, l := range betGrid {
		logs[i] = l*s1 - (-math.Log1p(-l)-l)*s2
		top = max(top, logs[i])
	}
	var sum float64
	for _, v := range logs {
		sum += math.Exp(v - top)
	}
	return top + math.Log(sum/float64(len(betGrid)))
}
