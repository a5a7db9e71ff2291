// Package verdict owns the statistics that the rollback policy decides
// by: the estimates of success rates, the scores that compare two of
// them, the runs of failures that are unlikely at a rate, Wald's
// sequential probability ratio test, the binomial and beta-binomial tails
// (the backstop's test), and the exact comparisons of rates and average
// latencies with thresholds.
//
// Its functions are pure and allocate nothing (but Compare's exact
// fallback): they take plain numbers (counts of calls and failures, rates,
// durations) and know nothing of the policy that uses them. What to
// compare, with which thresholds, and what the answer means for a change
// belong to the root package's RollbackPolicy.
package verdict

import "math"

// Smoothed is k out of n with half of one and half of the other added,
// (k+½)/(n+1): the rates the tests compare are estimated so, which keeps
// them off 0 and 1. It is ½ for n = 0.
func Smoothed(k, n int) float64 { return (float64(k) + 0.5) / float64(n+1) }

// ClampRate keeps a rate in [0.01, 0.99], where the tests' logarithms and
// standard errors stay finite. NaN stays NaN.
func ClampRate(r float64) float64 { return min(max(r, 0.01), 0.99) }

// Estimate is the success rate of successes out of calls with half a
// success and half a failure added, and k calls at rate r as a prior (k
// zero: none), kept in [0.01, 0.99]; and m, the calls the rate is
// estimated from, calls+1+k (the halves and the prior included). r must be
// finite.
func Estimate(successes, calls int, k, r float64) (p, m float64) {
	m = float64(calls+1) + k
	return ClampRate((float64(successes) + 0.5 + k*r) / m), m
}

// WithinZ reports whether r, the rate of n calls, lies within z standard
// errors of ref: |r − ref| ≤ z·√(max(ref(1−ref), 0.01)/n). The variance's
// floor keeps a reference of 0 or 1 from refusing every difference. With
// n = 0, every r is within.
func WithinZ(r, ref float64, n int, z float64) bool {
	return math.Abs(r-ref) <= z*math.Sqrt(max(ref*(1-ref), 0.01)/float64(n))
}

// ZScore is how many standard errors the success rate before lies above
// the success rate after, each the Smoothed rate of its calls' successes
// (calls less failures), the error that of the difference of the two.
// Negative when after's rate is the higher.
func ZScore(beforeCalls, beforeFailures, afterCalls, afterFailures int) float64 {
	pb := Smoothed(beforeCalls-beforeFailures, beforeCalls)
	pa := Smoothed(afterCalls-afterFailures, afterCalls)
	se := math.Sqrt(pb*(1-pb)/float64(beforeCalls+1) + pa*(1-pa)/float64(afterCalls+1))
	return (pb - pa) / se
}

// GainScore is how many standard errors the success rate after lies
// above the success rate before (each Smoothed), the error being that of
// after's count at before's rate: is after's rate out of reach of the rate
// before it? Negative when after's rate is the lower.
func GainScore(beforeCalls, beforeFailures, afterCalls, afterFailures int) float64 {
	pb := Smoothed(beforeCalls-beforeFailures, beforeCalls)
	pa := Smoothed(afterCalls-afterFailures, afterCalls)
	return (pa - pb) / math.Sqrt(pb*(1-pb)/float64(afterCalls+1))
}

// RunLength is the fewest consecutive failures that, at failure rate q,
// happen in a row with a probability of at most odds: ⌈log odds / log q⌉,
// at least 1. For q ≤ 0 or odds ≥ 1 it is 1; for q ≥ 1 (or NaN), or odds
// ≤ 0 (or NaN), no run is that unlikely and it is math.MaxInt.
func RunLength(q, odds float64) int {
	switch {
	case q <= 0 || odds >= 1:
		return 1
	case !(q < 1) || !(odds > 0):
		return math.MaxInt
	}
	n := math.Ceil(math.Log(odds) / math.Log(q))
	if n >= math.MaxInt {
		return math.MaxInt
	}
	return max(int(n), 1)
}
