package selfimprove

import (
	"fmt"
	"math"
	"strings"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// The methods' rules, which Decide (rollback.go) picks by Method:
// MethodQuick and MethodSequential's sequential test against the
// reference before the change, MethodCanary's comparison of the arms, and
// MethodFixed's fixed thresholds. They share the consecutive-failure and
// latency rules of rollback_latency.go and the backstop of rollback_backstop.go.

const (
	// windowWeight is the weight, in calls, of the analysis window's
	// success rate in the sequential tests' reference rate when "before"
	// disagrees with it: a light prior, as the fault changed the regime.
	windowWeight = 4
	// canaryZ is how many standard errors wide MethodCanary wants the gap
	// between the arms' success rates before it rolls back.
	canaryZ = 3
	// poolZ is how many standard errors apart "before" and the analysis
	// window's success rates may be for the sequential tests to pool them.
	poolZ = 3
	// streakOdds is how unlikely, under the previous config's failure rate
	// over a run of the change's consecutive failures, that run must be for
	// MethodCanary to blame it on the change.
	streakOdds = 0.001
	// harmOdds is how unlikely at the reference a change's failure count
	// must be for the early rule of the sequential methods (see
	// clearlyHarmful) to roll it back, at most: FalseRollbacks/harmDivisor
	// if less (0.08 % under MethodSequential).
	harmOdds    = 0.001
	harmDivisor = 5
	// canaryHarmOdds is MethodCanary's for its early rule (see
	// canaryHarmful): its only test against the reference before the
	// change until the backstop, paid for by a backstop at 1 % (was 2 %).
	canaryHarmOdds = 0.005
)

// withPrior returns Before's counts completed, when it has fewer than
// MinBeforeCalls calls, with as many calls at the analysis window's
// success rate (rounded to whole failures), and a note that says so;
// Before itself otherwise. Latency is compared with Before's alone.
func (p RollbackPolicy) withPrior(e Evidence) (Stats, string) {
	b, w := e.Before, e.Window
	k := p.MinBeforeCalls - b.Calls
	if k <= 0 || w.Calls <= 0 {
		return b, ""
	}
	f := int(math.Round(float64(k) * float64(w.Failures) / float64(w.Calls)))
	return newStats(b.Calls+k, b.Failures+f, 0), fmt.Sprintf(" (before: %d calls since the fault began, fewer than %d, completed with %d at the analysis window's %.1f%%)",
		b.Calls, p.MinBeforeCalls, k, 100*rate(w))
}

// fixed is MethodFixed's rule.
func (p RollbackPolicy) fixed(before, after Stats) Verdict {
	return p.fixedRule(before, before, after, nil)
}

// twoStage is MethodFixed's rule with the backstop on: the fixed rule
// rolls back on the MinCalls-th call (before completed by withPrior, note
// saying so), and the backstop decides on the BackstopCalls-th.
func (p RollbackPolicy) twoStage(e Evidence, before Stats, note string) Verdict {
	a := e.After
	q0 := (float64(before.Failures) + 0.5) / float64(before.Calls+1)
	if need, ok := consecutive(a, p.MaxConsecutiveFailures, q0); ok {
		return runVerdict(a, need, vsRef(e))
	}
	if a.Calls == p.MinCalls && before.Calls > 0 && dropExceeds(before, a, p.MaxSuccessDrop) {
		return Verdict{DecisionRollback, fmt.Sprintf("%s; success rate fell %.1f points (%.1f%% → %.1f%%), more than %g%s",
			fellWords(a, e), 100*(rate(before)-rate(a)), 100*rate(before), 100*rate(a), p.MaxSuccessDrop, note)}
	}
	if a.Calls < p.BackstopCalls {
		return Verdict{Decision: DecisionWait}
	}
	if v, ok := p.backstop(a, e, 0); ok {
		return v
	}
	p0, ref := p.backstopRef(e)
	return p.latency(e.Before, a, e.Before, e.like(p), "before", fmt.Sprintf("; not rolled back on %d calls, backstop test passed against a reference of %.1f%% (%s)", p.MinCalls, 100*p0, ref))
}

// fixedRule is MethodFixed's rule, with the success rate compared with
// before's and the latency with lat's (like: see latency).
func (p RollbackPolicy) fixedRule(before, lat, after Stats, like *Stats) Verdict {
	q0 := 0.0
	if !p.SeedCompatible && before.Calls > 0 {
		q0 = (float64(before.Failures) + 0.5) / float64(before.Calls+1)
	}
	if need, ok := consecutive(after, p.MaxConsecutiveFailures, q0); ok {
		return runVerdict(after, need, vsFailed(lat, "before"))
	}
	if after.Calls < p.MinCalls {
		return Verdict{Decision: DecisionWait}
	}
	if before.Calls <= 0 {
		return Verdict{DecisionConfirm, okWords(after, before, "before")}
	}
	if on(p.MaxSuccessDrop) {
		if dropExceeds(before, after, p.MaxSuccessDrop) {
			return Verdict{DecisionRollback, fmt.Sprintf("%s, %s; success rate fell %.1f points (%.1f%% → %.1f%%), more than %g",
				failedWords(after, false), vsFailed(lat, "before"), 100*(rate(before)-rate(after)), 100*rate(before), 100*rate(after), p.MaxSuccessDrop)}
		}
		if !p.SeedCompatible && after.Calls < p.MaxCalls && dropIs(before, after, p.MaxSuccessDrop) {
			// Exactly at the threshold: the next call decides.
			return Verdict{Decision: DecisionWait}
		}
	}
	return p.latency(lat, after, lat, like, "before", "")
}

// sequential is the rule of MethodQuick and MethodSequential.
func (p RollbackPolicy) sequential(e Evidence) Verdict {
	a := e.After
	if !on(p.MaxSuccessDrop) || (e.Before.Calls <= 0 && e.Window.Calls <= 0) {
		return p.fixedRule(e.Before, e.Before, a, e.like(p))
	}
	p0, ref := p.reference(e)
	if need, ok := consecutive(a, p.MaxConsecutiveFailures, 1-p0); ok {
		return runVerdict(a, need, vsRef(e))
	}
	if p.backstopRuns(a.Calls) {
		if v, ok := p.backstop(a, e, 0); ok {
			return v
		}
	}
	if v, ok := p.clearlyHarmful(a, e); ok {
		return v
	}
	p1 := verdict.Alternative(p0, 2*p.MaxSuccessDrop/100)
	llr := verdict.LogLR(a.Calls-a.Failures, a.Failures, p0, p1)
	lower, upper := verdict.Limits(p.FalseRollbacks, p.MissedRollbacks)
	if llr >= upper {
		return Verdict{DecisionRollback, fmt.Sprintf("%s; %s test: success %.1f%% against a reference of %.1f%% (%s); the likelihood ratio for a fall to %.1f%% reached %.1f (limit %.1f)",
			fellWords(a, e), p.Method, 100*rate(a), 100*p0, ref, 100*p1, math.Exp(llr), math.Exp(upper))}
	}
	switch {
	case llr <= lower && a.Calls >= p.MinCalls:
		return p.latency(e.Before, a, ref.gainRef(), e.like(p), "before", fmt.Sprintf("; %s test passed against a reference of %.1f%% (%s)", p.Method, 100*p0, ref))
	case a.Calls >= p.MaxCalls:
		return p.latency(e.Before, a, ref.gainRef(), e.like(p), "before", fmt.Sprintf("; %s test undecided at %d calls against a reference of %.1f%% (%s)", p.Method, p.MaxCalls, 100*p0, ref))
	}
	return Verdict{Decision: DecisionWait}
}

// reference is the sequential tests' success rate under H0, and how it
// was formed. When Before has fewer than MinBeforeCalls calls, the
// analysis window's rate stands in for the missing ones (a prior worth
// that many calls). Otherwise, when Before agrees with Window (their rates
// within poolZ standard errors of Before's count), it is Window's rate;
// when it does not (the fault changed the regime), Before's rate shrunk
// toward Window's with the weight of windowWeight calls. Each count gets
// half a success and half a failure; the rate is kept in [0.01, 0.99].
func (p RollbackPolicy) reference(e Evidence) (float64, refNote) {
	b, w := e.Before, e.Window
	n := refNote{before: b, window: w}
	var p0 float64
	if w.Calls <= 0 {
		p0, n.weight = verdict.Estimate(b.Calls-b.Failures, b.Calls, 0, 0)
		return p0, n
	}
	rw := rate(w)
	switch {
	case b.Calls < p.MinBeforeCalls:
		n.how, n.prior = refPrior, p.MinBeforeCalls-b.Calls
		p0, n.weight = verdict.Estimate(b.Calls-b.Failures, b.Calls, float64(n.prior), rw)
	case verdict.WithinZ(rate(b), rw, b.Calls, poolZ):
		n.how = refPooled
		p0, n.weight = verdict.Estimate(w.Calls-w.Failures, w.Calls, 0, 0)
	default:
		n.how = refShrunk
		p0, n.weight = verdict.Estimate(b.Calls-b.Failures, b.Calls, windowWeight, rw)
	}
	return p0, n
}

// refNote says how reference formed p0, for verdicts: it is formatted only
// when a verdict is given.
type refNote struct {
	how            int     // refBefore, refPrior, refPooled or refShrunk
	prior          int     // the calls the window stood in for
	weight         float64 // the calls p0 is estimated from, halves included
	before, window Stats
}

// How reference formed p0.
const (
	refBefore = iota // "before" alone: no window
	refPrior         // "before" completed with the window's rate
	refPooled        // the window's rate, which agrees with "before"
	refShrunk        // "before"'s rate shrunk toward the window's
)

// gainRef is the stats a rise of the success rate is judged against: the
// analysis window when p0 is its rate (more calls, the same regime),
// "before" otherwise.
func (n refNote) gainRef() Stats {
	if n.how == refPooled {
		return n.window
	}
	return n.before
}

func (n refNote) String() string {
	b, w := n.before, n.window
	switch n.how {
	case refPrior:
		return fmt.Sprintf("%d calls since the fault began, fewer than %d, completed with %d at the analysis window's %.1f%%",
			b.Calls, b.Calls+n.prior, n.prior, 100*rate(w))
	case refPooled:
		return fmt.Sprintf("the analysis window's %d calls, which agree with the last %d", w.Calls, b.Calls)
	case refShrunk:
		return fmt.Sprintf("the last %d calls at %.1f%%, unlike the analysis window's %.1f%%", b.Calls, 100*rate(b), 100*rate(w))
	}
	return fmt.Sprintf("%d calls before", b.Calls)
}

// canary is MethodCanary's rule: Control is the reference.
func (p RollbackPolicy) canary(e Evidence) Verdict {
	a, c, sc := e.After, e.Control, e.StreakControl
	// Consecutive failures are the change's fault only if the previous
	// config succeeded meanwhile, often enough that a run this long would
	// be unlikely under it: its failure rate over the run, taken as
	// (F+½)/(C+1), makes the run less likely than streakOdds (at most 10×
	// MaxConsecutiveFailures). A fault that hits both arms is not blamed
	// on the change. Not so the run the change was made for: applied
	// during a run of at least MaxConsecutiveFailures failures (an outage,
	// shared or not), a change that failed every one of its calls has not
	// ended it, and MaxConsecutiveFailures of them roll it back, as under
	// the other methods. Kept, it would be verified against the outage
	// (and block the analysis of a later fault) for CanaryCalls calls of
	// the previous config.
	if a.ConsecutiveFailures == a.Calls && e.Window.ConsecutiveFailures >= p.MaxConsecutiveFailures {
		if need, ok := consecutive(a, p.MaxConsecutiveFailures, 0); ok {
			return runVerdict(a, need, fmt.Sprintf("after a run of %d failures before it that it has not ended", e.Window.ConsecutiveFailures))
		}
	}
	if sc.Calls > sc.Failures {
		// The previous config's failure rate over the run, or over all
		// its calls since the change once it has MinBeforeCalls of them,
		// whichever is higher: one success during a run says little of
		// a previous config that fails half its calls.
		q := verdict.Smoothed(sc.Failures, sc.Calls)
		if c.Calls >= p.MinBeforeCalls {
			q = max(q, verdict.Smoothed(c.Failures, c.Calls))
		}
		limit := p.MaxConsecutiveFailures
		if limit > 0 {
			limit = max(limit, min(verdict.RunLength(q, streakOdds), 10*limit))
		}
		if need, ok := consecutive(a, limit, 0); ok {
			return runVerdict(a, need, fmt.Sprintf("while the previous config succeeded %d of %d calls meanwhile", sc.Calls-sc.Failures, sc.Calls))
		}
	}
	if a.Calls >= p.MinCalls && c.Calls >= p.MinCalls && on(p.MaxSuccessDrop) && dropExceeds(c, a, p.MaxSuccessDrop) {
		if z := verdict.ZScore(c.Calls, c.Failures, a.Calls, a.Failures); z >= canaryZ {
			return Verdict{DecisionRollback, fmt.Sprintf("%s, %s; success rate %.1f%% against %.1f%%: %.1f points lower (more than %g), %.1f standard errors",
				failedWords(a, false), vsFailed(c, "under the previous config in the same period"), 100*rate(a), 100*rate(c), 100*(rate(c)-rate(a)), p.MaxSuccessDrop, z)}
		}
	}
	if v, ok := p.canaryHarmful(e); ok {
		return v
	}
	if p.backstopRuns(a.Calls+c.Calls) && (e.Before.Calls > 0 || e.Window.Calls > 0) {
		if v, ok := p.canaryBackstop(e); ok {
			return v
		}
	}
	if a.Calls < p.MinCalls || c.Calls < p.CanaryCalls {
		return Verdict{Decision: DecisionWait}
	}
	return p.latency(c, a, c, e.like(p), "under the previous config in the same period", "")
}

// clearlyHarmful is the early rule of the sequential methods (and, by
// canaryHarmful, of MethodCanary): before the backstop, a change whose
// success rate lies more than twice MaxSuccessDrop below a reference is
// rolled back as soon as its failure count is one that reference (its
// uncertainty included, as in the backstop) reaches in at most the
// method's odds of cases (see harmOdds). The reference is the backstop's;
// under MethodQuick and MethodSequential, when that one does not show the
// harm, also the calls before the change alone, if they number at least
// MinBeforeCalls: a window whose rate earlier harmful tweaks pulled down
// agrees with a clean "before" of 16 calls and is pooled with it, and
// would shield the next harmful tweak. Looked at after every call, it
// rolls back a harmless change in well under BackstopCalls times those
// odds of cases, and a change that costs 40 points or more within a few
// calls.
func (p RollbackPolicy) clearlyHarmful(a Stats, e Evidence) (Verdict, bool) {
	if a.Failures < 2 || p.BackstopCalls > 0 && a.Calls+e.Control.Calls >= p.BackstopCalls {
		return Verdict{}, false
	}
	odds := min(harmOdds, p.FalseRollbacks/harmDivisor)
	if p.Method == MethodCanary {
		odds = canaryHarmOdds
	}
	p0, ref := p.backstopRef(e)
	tail, ok := p.harmTail(a, p0, ref.weight, odds)
	if b := e.Before; !ok && p.Method != MethodCanary && b.Calls > 0 && b.Calls >= p.MinBeforeCalls {
		p0, ref.weight = verdict.Estimate(b.Calls-b.Failures, b.Calls, 0, 0)
		ref.how = refBefore
		tail, ok = p.harmTail(a, p0, ref.weight, odds)
	}
	if !ok {
		return Verdict{}, false
	}
	return Verdict{DecisionRollback, fmt.Sprintf("%s; clearly harmful: success %.1f%% against a reference of %.1f%% (%s): as many failures or more have a chance of %.2g%% there, at most %g%%",
		fellWords(a, e), 100*rate(a), 100*p0, ref, 100*tail, 100*odds)}, true
}

// harmTail is the early rule's test of a against the reference rate p0
// estimated from m calls: the chance of as many failures or more there,
// and whether it is at most odds with a's rate more than twice
// MaxSuccessDrop below p0 (not computed otherwise).
func (p RollbackPolicy) harmTail(a Stats, p0, m, odds float64) (float64, bool) {
	if rate(a) >= p0-2*p.MaxSuccessDrop/100 {
		return 1, false
	}
	tail := verdict.PredictiveTail(a.Calls, a.Failures, (1-p0)*m, p0*m)
	return tail, tail <= odds
}

// canaryHarmful is MethodCanary's early rule: clearlyHarmful on the
// change's side, against the reference before the change (the calls
// before it and the previous config's side's since), but not on a
// fault both sides share. The change's current run of failures is left
// out unless the previous config succeeded during it, and the rule stays
// silent while the previous config's calls fail more than the reference
// explains (as many failures or more in at most shiftOdds of cases): the
// conditions changed, and the comparison of the sides decides.
func (p RollbackPolicy) canaryHarmful(e Evidence) (Verdict, bool) {
	if !on(p.MaxSuccessDrop) || (e.Before.Calls <= 0 && e.Window.Calls <= 0) {
		return Verdict{}, false
	}
	a, c, sc := e.After, e.Control, e.StreakControl
	if sc.Calls <= sc.Failures && a.ConsecutiveFailures > 0 {
		run := min(a.ConsecutiveFailures, a.Failures)
		a.Calls, a.Failures, a.ConsecutiveFailures = a.Calls-run, a.Failures-run, 0
	}
	if p0, ref := p.backstopRef(e); c.Calls > 0 && verdict.PredictiveTail(c.Calls, c.Failures, (1-p0)*ref.weight, p0*ref.weight) <= shiftOdds {
		return Verdict{}, false
	}
	// The reference is the previous config's calls since the fault began:
	// those before the change, and its side's since.
	all := e
	all.Before.Calls += c.Calls
	all.Before.Failures += c.Failures
	v, ok := p.clearlyHarmful(a, all)
	if ok && c.Calls > 0 {
		v.Reason = strings.Replace(v.Reason, vsRef(all), fmt.Sprintf("%s and %d of the %d under the previous config since", vsRef(e), c.Failures, c.Calls), 1)
	}
	return v, ok
}

// String returns "quick", "sequential", "canary" or "fixed".
func (m Method) String() string {
	switch m {
	case MethodQuick:
		return "quick"
	case MethodFixed:
		return "fixed"
	case MethodSequential:
		return "sequential"
	case MethodCanary:
		return "canary"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}
