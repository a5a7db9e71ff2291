package selfimprove

import (
	"fmt"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
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
// backstopOdds of cases (canaryBackstopOdds under MethodCanary) rolls the
// change back.
//
// At the default 60 calls and a 90 % reference estimated from 200 calls,
// a change that costs 30 points is rolled back by it in more than 99.9 %
// of cases; see docs/decisions.md for each method's use of it.

const (
	// backstopOdds is how unlikely at the reference the change's failure
	// count must be for the backstop to roll it back;
	// canaryBackstopOdds is MethodCanary's, whose backstop runs on the
	// change's share of the calls only: 1 % too since its early rule
	// (canaryHarmOdds) takes a share of its false rollbacks (was 2 %).
	backstopOdds       = 0.01
	canaryBackstopOdds = 0.01
	// poolOdds is the one-sided tail of three standard errors of a
	// normal: how unlikely "before"'s failure count must be at the
	// analysis window's rate for the two to disagree.
	poolOdds = 0.00135
	// shiftOdds is how unlikely, at the reference, the previous config's
	// failures must be for MethodCanary's backstop to leave the verdict
	// to the comparison of the arms.
	shiftOdds = 0.01
)

// backstopRuns reports whether the backstop is on and due after calls
// calls under verification.
func (p RollbackPolicy) backstopRuns(calls int) bool {
	return p.BackstopCalls > 0 && on(p.MaxSuccessDrop) && calls == p.BackstopCalls
}

// backstop applies the backstop test to a, the change's calls, against
// the reference p0 estimated from m calls (see backstopRef): it rolls back when a's
// failures are at least as many as the predictive distribution reaches in
// at most backstopOdds of cases (canaryBackstopOdds under MethodCanary). ref describes the reference for the
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
	tail := verdict.PredictiveTail(a.Calls, a.Failures, (1-p0)*m, p0*m)
	if tail > odds {
		return Verdict{}, false
	}
	what := ""
	if shared > 0 {
		what = fmt.Sprintf(" (not counting the last %d, while the previous config failed too)", shared)
	}
	return Verdict{DecisionRollback, fmt.Sprintf("%s%s, %s: too many to be chance; backstop test at %d calls: success %.1f%% against a reference of %.1f%% (%s): as many failures or more have a chance of %.2g%% there, at most %g%%",
		failedWords(a, false), what, vsRef(e), p.BackstopCalls, 100*rate(a), 100*p0, ref, 100*tail, 100*odds)}, true
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
		p0, m := verdict.Estimate(w.Calls-w.Failures, w.Calls, 0, 0)
		return p0, refNote{how: refPooled, before: b, window: w, weight: m}
	}
	return p.reference(e)
}

// agrees reports whether before's failures are within reach of the
// window's failure rate (Smoothed and clamped): at that rate, as many
// failures or more, and as few or fewer, each have a chance above
// poolOdds, the one-sided tail of three standard errors of a normal,
// computed exactly on the binomial distribution.
func agrees(before, window Stats) bool {
	q := verdict.ClampRate(verdict.Smoothed(window.Failures, window.Calls))
	return verdict.Consistent(before.Calls, before.Failures, q, poolOdds)
}

// canaryBackstop is MethodCanary's backstop: the change's calls against
// the reference before the change, unless the previous config's calls say
// that conditions changed. A run of the change's failures during which
// every call of the previous config failed too is not counted; and when
// the previous config's calls fail more than the reference explains (as
// many failures or more in at most shiftOdds of cases) while the change
// does not fail significantly more than they do (canaryZ), the
// comparison of the arms decides alone.
func (p RollbackPolicy) canaryBackstop(e Evidence) (Verdict, bool) {
	p0, ref := p.backstopRef(e)
	a, c, sc := e.After, e.Control, e.StreakControl
	shared := 0
	if sc.Calls > 0 && sc.Failures == sc.Calls && a.ConsecutiveFailures > 0 {
		shared = min(a.ConsecutiveFailures, a.Failures)
		a.Calls, a.Failures = a.Calls-shared, a.Failures-shared
	}
	if c.Calls > 0 && verdict.PredictiveTail(c.Calls, c.Failures, (1-p0)*ref.weight, p0*ref.weight) <= shiftOdds &&
		verdict.ZScore(c.Calls, c.Failures, a.Calls, a.Failures) < canaryZ {
		return Verdict{}, false
	}
	v, ok := p.backstop(a, e, shared)
	if ok {
		v.Reason += fmt.Sprintf("; the previous config succeeded %d of %d calls in the same period", c.Calls-c.Failures, c.Calls)
	}
	return v, ok
}
