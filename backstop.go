package selfimprove

import (
	"fmt"
	"math"
)

// The backstop: whatever the method, a change that has run BackstopCalls
// calls under verification (both arms, under MethodCanary) faces a
// fixed-sample test of its success against the reference the change was
// judged by before it (the sequential tests' p0, see reference). The test
// weighs the reference's own uncertainty: p0 estimated from m calls is
// taken as a Beta(p0·m, (1−p0)·m) rate, and the change's failures are
// compared with the beta-binomial distribution that rate gives for its
// calls (the predictive distribution), not with a binomial at a point
// estimate. A failure count that distribution reaches in at most
// FalseRollbacks of cases rolls the change back.
//
// At the default 60 calls and a 90 % reference estimated from 200 calls,
// a change that costs 30 points is rolled back by it in more than 99.9 %
// of cases; see docs/decisions.md for each method's use of it.

// DefaultBackstopCalls is RollbackPolicy.BackstopCalls's default.
const DefaultBackstopCalls = 60

const (
	// backstopOdds is how unlikely at the reference the change's failure
	// count must be for the backstop to roll it back;
	// canaryBackstopOdds is MethodCanary's, whose backstop runs on the
	// change's share of the calls only.
	backstopOdds       = 0.01
	canaryBackstopOdds = 0.02
	// poolOdds is the one-sided tail of three standard errors of a
	// normal: how unlikely "before"'s failure count must be at the
	// analysis window's rate for the two to disagree.
	poolOdds = 0.00135
)

// backstopRuns reports whether the backstop is on and due after calls
// calls under verification.
func (p RollbackPolicy) backstopRuns(calls int) bool {
	return p.BackstopCalls > 0 && on(p.MaxSuccessDrop) && calls == p.BackstopCalls
}

// backstop applies the backstop test to a, the change's calls, against
// the reference p0 estimated from m calls (see backstopRef): it rolls back when a's
// failures are at least as many as the predictive distribution reaches in
// at most FalseRollbacks of cases. ref describes the reference for the
// verdict; shared is how many of the change's failures were left out
// (MethodCanary's runs of failures on both arms).
func (p RollbackPolicy) backstop(a Stats, e Evidence, shared int) (Verdict, bool) {
	if a.Calls <= 0 {
		return Verdict{}, false
	}
	p0, ref := p.backstopRef(e)
	m := ref.weight
	odds := backstopOdds
	if p.Method == MethodCanary {
		odds = canaryBackstopOdds
	}
	tail := predictiveTail(a.Calls, a.Failures, (1-p0)*m, p0*m)
	if tail > odds {
		return Verdict{}, false
	}
	what := ""
	if shared > 0 {
		what = fmt.Sprintf(" (not counting the last %d, while the previous config failed too)", shared)
	}
	return Verdict{DecisionRollback, fmt.Sprintf("backstop test at %d calls: %d failures in %d calls%s (success %.1f%%) against a reference of %.1f%% (%s): as many failures or more have a chance of %.2g%% there, at most %g%%",
		p.BackstopCalls, a.Failures, a.Calls, what, 100*rate(a), 100*p0, ref, 100*tail, 100*odds)}, true
}

// predictiveTail is P(F ≥ f) for the failures F of n calls whose failure
// rate is Beta(fa, sb) distributed (fa and sb positive): the upper tail
// of the beta-binomial distribution. It sums the probabilities of f..n,
// the first from log-gamma functions and each next one by the ratio of
// consecutive terms. It allocates nothing.
func predictiveTail(n, f int, fa, sb float64) float64 {
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

// backstopRef is the backstop's reference: the sequential tests' (see
// reference), except that "before" and the analysis window are pooled
// whenever they agree by the exact test of agrees. Sixteen calls at a
// 90 % rate have 5 failures or more in 1.7 % of cases, where the normal
// approximation of three standard errors puts 0.13 %; a reference leaning
// on such a "before" would hide a real loss from the backstop.
func (p RollbackPolicy) backstopRef(e Evidence) (float64, refNote) {
	b, w := e.Before, e.Window
	if w.Calls > 0 && b.Calls >= p.MinBeforeCalls && agrees(b, w) {
		n := refNote{how: refPooled, before: b, window: w, weight: float64(w.Calls + 1)}
		return clampRate((float64(w.Calls-w.Failures) + 0.5) / n.weight), n
	}
	return p.reference(e)
}

// agrees reports whether before's failures are within reach of the
// window's failure rate q (half a failure and half a success added): at
// that rate, as many failures or more, and as few or fewer, each have a
// chance above poolOdds, the one-sided tail of three standard errors of
// a normal, computed exactly on the binomial distribution.
func agrees(before, window Stats) bool {
	q := clampRate((float64(window.Failures) + 0.5) / float64(window.Calls+1))
	n, f := before.Calls, before.Failures
	return binomTail(n, f, q) > poolOdds && binomTail(n, n-f, 1-q) > poolOdds
}

// binomTail is P(X ≥ k) for X ~ Binomial(n, q), 0 < q < 1.
func binomTail(n, k int, q float64) float64 {
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
