package selfimprove

import (
	"fmt"
	"math"
	"math/big"
	"time"
)

// RollbackPolicy decides whether a config change is kept. While a change is
// verified, the loop compares the calls that ran under the new version
// ("after") with a reference ("before"), by one of three methods:
//
//   - MethodFixed, the default: once MinCalls calls have run under the new
//     version, it rolls back if the success rate fell by more than
//     MaxSuccessDrop percentage points, or the average latency rose by more
//     than MaxLatencyRise percent and by at least MinLatencyRise; otherwise
//     it confirms the change and verification ends.
//   - MethodSequential: a sequential probability ratio test on success that
//     rolls back or confirms as soon as the evidence suffices, and never
//     later than MaxCalls calls.
//   - MethodCanary: while the change is verified, CanaryFraction of the
//     calls run the previous config, and the change is judged against those
//     calls over the same period.
//
// Under every method, MaxConsecutiveFailures consecutive failures under the
// new version roll it back at once. Under MethodCanary they do so only if
// the previous config's latest call succeeded, and twice as many do so
// regardless.
//
// "Before" is the recent regime: the calls since the fault began (the oldest
// failure within the agent's threshold window when the change was applied),
// at most the last BeforeCalls calls before the change. A change made
// because an upstream degraded is so judged against the degraded service,
// not against last week's. And a latency rise alone does not roll back a
// change that raised the success rate by more than MaxSuccessDrop points: a
// fix that turns failures into slower successes is kept.
//
// SeedCompatible restores the original rule literally: MethodFixed, "before"
// is the whole analysis window when the change was applied, and a latency
// rise rolls back whatever the success rate did.
//
// Comparisons of the fixed rule are exact: a drop of exactly MaxSuccessDrop
// points or a rise of exactly MaxLatencyRise percent is kept. Rates and
// averages are compared as exact fractions of the counts, never as rounded
// floats.
//
// The zero value is the default policy; each zero field takes its default,
// and a negative (or NaN, or +Inf) MaxSuccessDrop or MaxLatencyRise, or a
// negative MaxConsecutiveFailures, turns that rule off. New refuses, with
// ErrInvalidOption, an unknown Method, other negative counts and
// durations, FalseRollbacks or MissedRollbacks outside [0, 1), BeforeCalls
// above 16 and CanaryFraction above 0.5.
type RollbackPolicy struct {
	// Method is how the evidence is weighed. Default MethodFixed.
	Method Method
	// SeedCompatible restores the original rule exactly: MethodFixed
	// whatever Method says, "before" is the analysis window when the
	// change was applied, and the latency rule applies even when the
	// success rate rose. Default false.
	SeedCompatible bool

	// MinCalls is how many calls under the new version verification
	// waits for before comparing rates. Default 10.
	MinCalls int
	// BeforeCalls caps "before" at the last BeforeCalls calls before the
	// change (those since the fault began). Default MinCalls; at most 16,
	// the calls each agent keeps for it.
	BeforeCalls int
	// MaxSuccessDrop is the largest tolerated fall of the success rate,
	// in percentage points. Default 10.
	MaxSuccessDrop float64
	// MaxLatencyRise is the largest tolerated rise of the average latency,
	// in percent. Default 20.
	MaxLatencyRise float64
	// MinLatencyRise is the absolute floor below which a latency rise never
	// rolls back, so that microsecond noise on fast calls is ignored.
	// Default 1ms.
	MinLatencyRise time.Duration
	// MaxConsecutiveFailures under the new version roll back at once,
	// without waiting for MinCalls. Default 5.
	MaxConsecutiveFailures int

	// FalseRollbacks is MethodSequential's nominal rate of rolling back a
	// change that did not lower the success rate (the test's α). The rate
	// achieved is somewhat higher, as the reference rate is itself an
	// estimate: 0.8 % at a true 90 % in the simulation of docs/performance.md.
	// Default 0.005.
	FalseRollbacks float64
	// MissedRollbacks is MethodSequential's nominal rate of confirming a
	// change that lowered the success rate by twice MaxSuccessDrop (the
	// test's β).
	// Default 0.05.
	MissedRollbacks float64
	// MaxCalls is the most calls MethodSequential waits for: a change not
	// rolled back by then is judged on latency and confirmed. Default 100.
	MaxCalls int

	// CanaryFraction is the share of calls MethodCanary runs under the
	// previous config while a change is verified. Default 0.1; at most 0.5.
	CanaryFraction float64
	// CanaryCalls is how many calls of the previous config MethodCanary
	// waits for before it confirms a change. Default 2×MinCalls.
	CanaryCalls int
	// CanarySeed seeds the choice of the calls that run the previous
	// config: with the same seed, the same sequence of calls runs the same
	// arms. Default 0.
	CanarySeed uint64
}

// Method is how a RollbackPolicy weighs the evidence about a change.
type Method uint8

// The methods.
const (
	// MethodFixed compares MinCalls calls under the change with the
	// recent regime before it, by fixed thresholds.
	MethodFixed Method = iota
	// MethodSequential runs a sequential probability ratio test on the
	// success of each call under the change, with H0 "the success rate is
	// p0" (p0 the recent regime's rate, shrunk toward the analysis window's
	// rate with the weight of 30 calls, at most 0.99) against H1 "it is p0
	// less twice MaxSuccessDrop points". It rolls back as soon as the
	// likelihood ratio reaches (1-MissedRollbacks)/FalseRollbacks. When it
	// falls to MissedRollbacks/(1-FalseRollbacks) after at least MinCalls
	// calls, or at MaxCalls calls, the latency rule decides between roll
	// back and confirm.
	MethodSequential
	// MethodCanary runs CanaryFraction of the calls under the previous
	// config while a change is verified (Report.Arm says which) and compares
	// the two arms over the same period, so that an upstream change that
	// hits both is not blamed on the change. Once each arm has MinCalls
	// calls, it rolls back when the change's success rate is more than
	// MaxSuccessDrop points below the previous config's and the gap is
	// three standard errors wide; when the previous config has run
	// CanaryCalls calls, the latency rule decides between roll back and
	// confirm.
	MethodCanary
)

// String returns "fixed", "sequential" or "canary".
func (m Method) String() string {
	switch m {
	case MethodFixed:
		return "fixed"
	case MethodSequential:
		return "sequential"
	case MethodCanary:
		return "canary"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// The default policy values.
const (
	DefaultVerifyCalls            = 10
	DefaultMaxSuccessDrop         = 10.0
	DefaultMaxLatencyRise         = 20.0
	DefaultMinLatencyRise         = time.Millisecond
	DefaultMaxConsecutiveFailures = 5
	DefaultFalseRollbacks         = 0.005
	DefaultMissedRollbacks        = 0.05
	DefaultSequentialMaxCalls     = 100
	DefaultCanaryFraction         = 0.1
)

const (
	// maxBeforeCalls is how many recent calls each agent keeps for the
	// recent regime: the largest BeforeCalls.
	maxBeforeCalls = 16
	// windowWeight is the weight, in calls, of the analysis window's
	// success rate in MethodSequential's reference rate.
	windowWeight = 30
	// canaryZ is how many standard errors wide MethodCanary wants the gap
	// between the arms' success rates before it rolls back.
	canaryZ = 3
	// maxCanaryFraction caps CanaryFraction.
	maxCanaryFraction = 0.5
)

// validate checks the fields against their documented ranges: a zero
// field takes its default, a negative MaxSuccessDrop, MaxLatencyRise or
// MaxConsecutiveFailures turns its rule off, and anything else out of
// range is an error naming the field.
func (p RollbackPolicy) validate() error {
	rate := func(f float64) bool { return f >= 0 && f < 1 } // false for NaN
	switch {
	case p.Method > MethodCanary:
		return fmt.Errorf("Method %d is unknown", int(p.Method))
	case p.MinCalls < 0:
		return fmt.Errorf("MinCalls %d is negative", p.MinCalls)
	case p.BeforeCalls < 0 || p.BeforeCalls > maxBeforeCalls:
		return fmt.Errorf("BeforeCalls %d not in 0..%d", p.BeforeCalls, maxBeforeCalls)
	case p.MinLatencyRise < 0:
		return fmt.Errorf("MinLatencyRise %v is negative", p.MinLatencyRise)
	case !rate(p.FalseRollbacks):
		return fmt.Errorf("FalseRollbacks %v not in [0, 1)", p.FalseRollbacks)
	case !rate(p.MissedRollbacks):
		return fmt.Errorf("MissedRollbacks %v not in [0, 1)", p.MissedRollbacks)
	case p.MaxCalls < 0:
		return fmt.Errorf("MaxCalls %d is negative", p.MaxCalls)
	case !(p.CanaryFraction >= 0 && p.CanaryFraction <= maxCanaryFraction):
		return fmt.Errorf("CanaryFraction %v not in [0, %v]", p.CanaryFraction, maxCanaryFraction)
	case p.CanaryCalls < 0:
		return fmt.Errorf("CanaryCalls %d is negative", p.CanaryCalls)
	}
	return nil
}

// withDefaults fills the zero fields.
func (p RollbackPolicy) withDefaults() RollbackPolicy {
	if p.SeedCompatible {
		p.Method = MethodFixed
	}
	if p.MinCalls <= 0 {
		p.MinCalls = DefaultVerifyCalls
	}
	if p.BeforeCalls <= 0 {
		p.BeforeCalls = p.MinCalls
	}
	p.BeforeCalls = min(p.BeforeCalls, maxBeforeCalls)
	if p.MaxSuccessDrop == 0 {
		p.MaxSuccessDrop = DefaultMaxSuccessDrop
	}
	if p.MaxLatencyRise == 0 {
		p.MaxLatencyRise = DefaultMaxLatencyRise
	}
	if p.MinLatencyRise == 0 {
		p.MinLatencyRise = DefaultMinLatencyRise
	}
	if p.MaxConsecutiveFailures == 0 {
		p.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	if !(p.FalseRollbacks > 0 && p.FalseRollbacks < 1) {
		p.FalseRollbacks = DefaultFalseRollbacks
	}
	if !(p.MissedRollbacks > 0 && p.MissedRollbacks < 1) {
		p.MissedRollbacks = DefaultMissedRollbacks
	}
	if p.MaxCalls <= 0 {
		p.MaxCalls = DefaultSequentialMaxCalls
	}
	p.MaxCalls = max(p.MaxCalls, p.MinCalls)
	if !(p.CanaryFraction > 0) {
		p.CanaryFraction = DefaultCanaryFraction
	}
	p.CanaryFraction = min(p.CanaryFraction, maxCanaryFraction)
	if p.CanaryCalls <= 0 {
		p.CanaryCalls = 2 * p.MinCalls
	}
	p.CanaryCalls = max(p.CanaryCalls, p.MinCalls)
	return p
}

// Decision is a policy's answer about a change under verification.
type Decision int

// The decisions.
const (
	DecisionWait     Decision = iota // not enough evidence yet: keep verifying
	DecisionConfirm                  // keep the change and end verification
	DecisionRollback                 // restore the previous config
)

// String returns "wait", "confirm" or "rollback".
func (d Decision) String() string {
	switch d {
	case DecisionWait:
		return "wait"
	case DecisionConfirm:
		return "confirm"
	case DecisionRollback:
		return "rollback"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Verdict is a Decision with the reason for it.
type Verdict struct {
	Decision Decision
	Reason   string
}

// Evidence is what a policy judges a change by. Of each Stats it uses
// Calls, Failures and TotalLatency, and of After also ConsecutiveFailures.
type Evidence struct {
	// Before is the reference: the recent regime when the change was
	// applied (the analysis window under SeedCompatible).
	Before Stats
	// Window is the analysis window's stats when the change was applied;
	// MethodSequential shrinks Before's success rate toward its rate.
	Window Stats
	// After counts the calls that ran under the change.
	After Stats
	// Control counts the calls that ran under the previous config while
	// the change was verified (MethodCanary only).
	Control Stats
}

// Decide judges a change by p's Method. It is a pure function.
func (p RollbackPolicy) Decide(e Evidence) Verdict {
	p = p.withDefaults()
	switch p.Method {
	case MethodSequential:
		return p.sequential(e)
	case MethodCanary:
		return p.canary(e)
	}
	return p.fixed(e.Before, e.After)
}

// Judge decides about a change by the fixed rule, whatever p's Method,
// from the stats before it and the stats of the calls under it. It is a
// pure function.
func (p RollbackPolicy) Judge(before, after Stats) Verdict {
	return p.withDefaults().fixed(before, after)
}

// fixed is MethodFixed's rule.
func (p RollbackPolicy) fixed(before, after Stats) Verdict {
	if v, ok := consecutive(after, p.MaxConsecutiveFailures); ok {
		return v
	}
	if after.Calls < p.MinCalls {
		return Verdict{Decision: DecisionWait}
	}
	if before.Calls <= 0 {
		return Verdict{DecisionConfirm, fmt.Sprintf("%d calls under the new config, no calls before to compare with", after.Calls)}
	}
	if on(p.MaxSuccessDrop) && dropExceeds(before, after, p.MaxSuccessDrop) {
		return Verdict{DecisionRollback, fmt.Sprintf("success rate fell %.1f points (%.1f%% → %.1f%%), more than %g",
			100*(rate(before)-rate(after)), 100*rate(before), 100*rate(after), p.MaxSuccessDrop)}
	}
	return p.latency(before, after, "")
}

// latency ends verification by the latency rule: it rolls back if the
// average latency rose too much and the success rate did not rise by more
// than MaxSuccessDrop points (under SeedCompatible, whatever it did), and
// confirms otherwise. note qualifies the confirmation.
func (p RollbackPolicy) latency(before, after Stats, note string) Verdict {
	b, a := avg(before), avg(after)
	if before.Calls > 0 && on(p.MaxLatencyRise) && latencyExceeds(before, after, p.MaxLatencyRise, p.MinLatencyRise) {
		if p.SeedCompatible || !on(p.MaxSuccessDrop) || !dropExceeds(after, before, p.MaxSuccessDrop) {
			return Verdict{DecisionRollback, fmt.Sprintf("average latency rose %.1f%% (%v → %v), more than %g%%",
				pctRise(b, a), b, a, p.MaxLatencyRise)}
		}
		note += fmt.Sprintf("; latency rose %.1f%%, kept because success rose %.1f points", pctRise(b, a), 100*(rate(after)-rate(before)))
	}
	if before.Calls <= 0 {
		return Verdict{DecisionConfirm, fmt.Sprintf("%d calls under the new config, no calls before to compare with%s", after.Calls, note)}
	}
	return Verdict{DecisionConfirm, fmt.Sprintf("%d calls under the new config: success %.1f%% (was %.1f%%), average latency %v (was %v)%s",
		after.Calls, 100*rate(after), 100*rate(before), a, b, note)}
}

// sequential is MethodSequential's rule.
func (p RollbackPolicy) sequential(e Evidence) Verdict {
	a := e.After
	if v, ok := consecutive(a, p.MaxConsecutiveFailures); ok {
		return v
	}
	if !on(p.MaxSuccessDrop) || (e.Before.Calls <= 0 && e.Window.Calls <= 0) {
		return p.fixed(e.Before, a)
	}
	p0 := reference(e)
	p1 := p0 - 2*p.MaxSuccessDrop/100
	if p1 <= 0 {
		p1 = p0 / 2
	}
	s, f := float64(a.Calls-a.Failures), float64(a.Failures)
	llr := s*math.Log(p1/p0) + f*math.Log((1-p1)/(1-p0))
	if upper := math.Log((1 - p.MissedRollbacks) / p.FalseRollbacks); llr >= upper {
		return Verdict{DecisionRollback, fmt.Sprintf("sequential test: %d failures in %d calls (success %.1f%%) against a reference of %.1f%%; the likelihood ratio for a fall to %.1f%% reached %.1f (limit %.1f)",
			a.Failures, a.Calls, 100*rate(a), 100*p0, 100*p1, math.Exp(llr), math.Exp(upper))}
	}
	lower := math.Log(p.MissedRollbacks / (1 - p.FalseRollbacks))
	switch {
	case llr <= lower && a.Calls >= p.MinCalls:
		return p.latency(e.Before, a, fmt.Sprintf("; sequential test passed against a reference of %.1f%%", 100*p0))
	case a.Calls >= p.MaxCalls:
		return p.latency(e.Before, a, fmt.Sprintf("; sequential test undecided at %d calls against a reference of %.1f%%", p.MaxCalls, 100*p0))
	}
	return Verdict{Decision: DecisionWait}
}

// reference is MethodSequential's success rate under H0: Before's rate,
// with half a success and half a failure added, shrunk toward Window's rate
// with the weight of windowWeight calls, at most 0.99.
func reference(e Evidence) float64 {
	n := float64(e.Before.Calls) + 1
	s := float64(e.Before.Calls-e.Before.Failures) + 0.5
	if e.Window.Calls > 0 {
		n += windowWeight
		s += windowWeight * rate(e.Window)
	}
	return min(max(s/n, 0.01), 0.99)
}

// canary is MethodCanary's rule: Control is the reference.
func (p RollbackPolicy) canary(e Evidence) Verdict {
	a, c := e.After, e.Control
	// Consecutive failures are the change's fault only if the previous
	// config's latest call succeeded; twice as many are, regardless.
	if c.ConsecutiveFailures == 0 {
		if v, ok := consecutive(a, p.MaxConsecutiveFailures); ok {
			return v
		}
	}
	if v, ok := consecutive(a, 2*p.MaxConsecutiveFailures); ok {
		return v
	}
	if a.Calls < p.MinCalls || c.Calls < p.MinCalls {
		return Verdict{Decision: DecisionWait}
	}
	if on(p.MaxSuccessDrop) && dropExceeds(c, a, p.MaxSuccessDrop) {
		if z := zScore(c, a); z >= canaryZ {
			return Verdict{DecisionRollback, fmt.Sprintf("success rate %.1f%% over %d calls under the new config, %.1f%% over %d calls under the previous one in the same period: %.1f points lower (more than %g), %.1f standard errors",
				100*rate(a), a.Calls, 100*rate(c), c.Calls, 100*(rate(c)-rate(a)), p.MaxSuccessDrop, z)}
		}
	}
	if c.Calls < p.CanaryCalls {
		return Verdict{Decision: DecisionWait}
	}
	return p.latency(c, a, fmt.Sprintf(" (previous config over the same period, %d calls)", c.Calls))
}

// zScore is how many standard errors before's success rate lies above
// after's, each rate with half a success and half a failure added.
func zScore(before, after Stats) float64 {
	pb := (float64(before.Calls-before.Failures) + 0.5) / float64(before.Calls+1)
	pa := (float64(after.Calls-after.Failures) + 0.5) / float64(after.Calls+1)
	se := math.Sqrt(pb*(1-pb)/float64(before.Calls+1) + pa*(1-pa)/float64(after.Calls+1))
	return (pb - pa) / se
}

// consecutive rolls back after limit consecutive failures (never when
// limit is not positive).
func consecutive(after Stats, limit int) (Verdict, bool) {
	if limit > 0 && after.ConsecutiveFailures >= limit {
		return Verdict{DecisionRollback, fmt.Sprintf("%d consecutive failures under the new config (limit %d)",
			after.ConsecutiveFailures, limit)}, true
	}
	return Verdict{}, false
}

// on reports whether a threshold turns its rule on: positive and finite.
func on(f float64) bool { return f > 0 && !math.IsInf(f, 1) }

// dropExceeds reports whether the success rate fell from before to after
// by more than pts percentage points, exactly:
// 100*(bs*an - as*bn) > pts*bn*an.
func dropExceeds(before, after Stats, pts float64) bool {
	bs, as := int64(before.Calls-before.Failures), int64(after.Calls-after.Failures)
	bn, an := int64(before.Calls), int64(after.Calls)
	return compare(100, bs, an, as, bn, pts, bn, an) > 0
}

// latencyExceeds reports whether the average latency rose from before to
// after by more than pct percent and by at least floor, exactly:
// 100*(al*bn - bl*an) > pct*bl*an and al*bn - bl*an >= floor*bn*an.
func latencyExceeds(before, after Stats, pct float64, floor time.Duration) bool {
	bl, al := int64(before.TotalLatency), int64(after.TotalLatency)
	bn, an := int64(before.Calls), int64(after.Calls)
	return compare(100, al, bn, bl, an, pct, bl, an) > 0 &&
		compare(1, al, bn, bl, an, float64(floor), bn, an) >= 0
}

// compare returns the sign of k*(a*d - b*c) - f*y*z, computed exactly for
// finite f. It decides in float64 when the two sides are far apart
// relative to the rounding of their terms, and in math/big otherwise.
func compare(k, a, d, b, c int64, f float64, y, z int64) int {
	ad, bc := float64(a)*float64(d), float64(b)*float64(c)
	lhs, rhs := float64(k)*(ad-bc), f*float64(y)*float64(z)
	scale := math.Abs(float64(k))*(math.Abs(ad)+math.Abs(bc)) + math.Abs(rhs)
	if diff := lhs - rhs; math.Abs(diff) > 1e-9*scale {
		if diff > 0 {
			return 1
		}
		return -1
	}
	l := mul(big.NewInt(k), sub(mul(big.NewInt(a), big.NewInt(d)), mul(big.NewInt(b), big.NewInt(c))))
	r := new(big.Rat).SetFloat64(f)
	r.Mul(r, new(big.Rat).SetInt(mul(big.NewInt(y), big.NewInt(z))))
	return new(big.Rat).SetInt(l).Cmp(r)
}

func mul(a, b *big.Int) *big.Int { return new(big.Int).Mul(a, b) }
func sub(a, b *big.Int) *big.Int { return new(big.Int).Sub(a, b) }

// avg is s's average latency, rounded to the microsecond for messages.
func avg(s Stats) time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return (s.TotalLatency / time.Duration(s.Calls)).Round(time.Microsecond)
}

func rate(s Stats) float64 {
	if s.Calls == 0 {
		return 1
	}
	return float64(s.Calls-s.Failures) / float64(s.Calls)
}

func pctRise(before, after time.Duration) float64 {
	if before == 0 {
		return 100
	}
	return 100 * float64(after-before) / float64(before)
}
