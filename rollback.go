package selfimprove

import (
	"fmt"
	"math"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// RollbackPolicy decides whether a config change is kept. While a change is
// verified, the loop compares the calls that ran under the new version
// ("after") with a reference ("before"), by one of four methods:
//
//   - MethodQuick, the default: a sequential probability ratio test on
//     success, tuned to catch moderate harm quickly (FalseRollbacks 5 %,
//     MissedRollbacks 2 %): from a 90 % base, a change that costs 30
//     points is rolled back within 30 calls in about 96 % of cases, and
//     about 4 % of harmless changes are rolled back.
//   - MethodSequential: the same test with stricter error rates
//     (FalseRollbacks 0.4 %, MissedRollbacks 2 %): under 1 % of harmless
//     changes rolled back, at the cost of slower detection.
//   - MethodCanary: while the change is verified, CanaryFraction of the
//     calls run the previous config, and the change is judged against those
//     calls over the same period.
//   - MethodFixed: on the MinCalls-th call under the new version, it
//     rolls back if the success rate fell by more than MaxSuccessDrop
//     points; a change it keeps is confirmed by the backstop.
//
// Under every method, the backstop test runs on the BackstopCalls-th call
// (60) under verification: the change's failure count is compared with
// the beta-binomial distribution its reference gives (the reference's
// own uncertainty included), and a count reached there in at most 1 % of
// cases rolls it back. From a 90 % base, no method keeps a change that
// costs 30 points for more than 60 calls in more than 1 % of cases.
//
// Before the backstop, MethodQuick, MethodSequential and MethodCanary
// roll a clearly harmful change back early: one whose success rate lies
// more than twice MaxSuccessDrop below the reference, with a failure
// count that reference (its uncertainty included) reaches in at most
// 0.1 % of cases (FalseRollbacks/5 if less: 0.08 % under
// MethodSequential; 0.5 % under MethodCanary, which has no sequential
// test). The reference is the backstop's, or under MethodQuick and
// MethodSequential "before" alone, so that a window that earlier harmful
// tweaks pulled down does not shield the next one. Under MethodCanary, not
// on a run of failures the previous config did not succeed during, nor
// while the previous config's calls fail more than the reference
// explains. From a 90 % base, a harmful tweak that makes 60 % of the
// calls fail is so undone after 6.6 calls on average (MethodQuick), 9.1
// (MethodSequential) and 9.9 (MethodCanary).
//
// Under every method, MaxConsecutiveFailures consecutive failures under the
// new version roll it back at once; more when the failure rate before the
// change makes that many in a row likely (as many as make such a run less
// likely than 1 in 1,000 at that rate, at most four times as many; not
// when that rate is 50 % or more, an outage). Under
// MethodCanary they do so only if a call of the previous config succeeded
// while they happened (between two of them): a fault that hits both
// configs is not the change's fault. Not so the run of failures the
// change was made in: a change applied after at least
// MaxConsecutiveFailures failures in a row that fails every one of its
// calls has not ended that run, and MaxConsecutiveFailures of them roll it
// back under MethodCanary too.
//
// "Before" is the recent regime: the calls since the fault began (the oldest
// failure within the agent's threshold window when the change was applied),
// at most the last BeforeCalls calls before the change. A change made
// because an upstream degraded is so judged against the degraded service,
// not against last week's. When "before" has fewer than MinBeforeCalls
// calls, its success rate is completed with the analysis window's for the
// missing calls (a prior), and the verdict says so. The sequential tests
// pool "before" with the analysis window while the two agree (their rates
// within three standard errors), and lean on "before" when they do not.
//
// Latency is compared like with like: the average latency of successful
// calls before and after (all calls where successes were not counted
// apart). A rise of more than MaxLatencyRise percent (and at least
// MinLatencyRise) rolls the change back, unless the change raised the
// success rate significantly (by 1.96 standard errors of the change's count
// at the rate before): such a fix, which turns failures into slower
// successes, is rolled back only when the latency of successes rose by
// more than MaxLatencyRiseOnGain percent. A change whose success rate rose,
// not yet significantly, is verified on, up to MaxCalls calls.
//
// A change that raised a bound of the call (a longer Timeout, more
// attempts, a longer Backoff) is judged on latency by what it changes: the
// successes the previous config would have served alike (on their first
// attempt, within the previous Timeout when the Timeout was raised)
// against the successes before. A rise of their average of more than
// MaxLatencyRise percent (and at least MinLatencyRise) rolls it back, or
// of more than 2.5 times MaxLatencyRise (at most MaxLatencyRiseOnGain)
// when the success rate rose significantly. The other successes, slower
// by design and bounded by the new config, are the raise's cost, not a
// regression (see Evidence.Comparable).
//
// SeedCompatible restores the original rule literally: MethodFixed, "before"
// is the whole analysis window when the change was applied, a fall of
// exactly MaxSuccessDrop points is kept, and a rise of the average latency
// of all calls rolls back whatever the success rate did.
//
// Comparisons with thresholds are exact: rates and averages are compared as
// exact fractions of the counts, never as rounded floats.
//
// The zero value is the default policy; each zero field takes its default,
// and a negative (or NaN, or +Inf) MaxSuccessDrop, MaxLatencyRise or
// MaxLatencyRiseOnGain, or a negative MaxConsecutiveFailures,
// MinBeforeCalls or BackstopCalls, turns that rule off. New refuses, with
// ErrInvalidOption and the field's name, a field outside the bound its
// comment gives: an unknown Method, other negative counts and durations,
// counts of calls above 1,000,000, MaxSuccessDrop above 100,
// MaxLatencyRise or MaxLatencyRiseOnGain above 10,000, FalseRollbacks or
// MissedRollbacks outside [0, 1), BeforeCalls or MinBeforeCalls above 16,
// CanaryFraction above 0.5, MinLatencyRise above 24 hours and RefuseFor
// above 366 days.
type RollbackPolicy struct {
	// Method is how the evidence is weighed. Default MethodQuick.
	Method Method
	// SeedCompatible restores the original rule exactly: MethodFixed
	// whatever Method says, "before" is the analysis window when the
	// change was applied, and the latency rule applies even when the
	// success rate rose. Default false.
	SeedCompatible bool

	// MinCalls is how many calls under the new version verification
	// waits for before it confirms a change (MethodFixed: before it
	// compares rates). Default 10; at most 1,000,000.
	MinCalls int
	// BeforeCalls caps "before" at the last BeforeCalls calls before the
	// change (those since the fault began). Default 16, the calls each
	// agent keeps for it, and at most that.
	BeforeCalls int
	// MinBeforeCalls is the fewest calls a change is judged against:
	// when fewer calls ended since the fault began, the success rate of
	// "before" is completed with the analysis window's for the missing
	// calls, and the verdict says so. And no strategy runs for an
	// automatically profiled agent before it has made this many calls, so
	// that a brand-new agent is not re-configured on its first failures;
	// an operator's threshold (SetThreshold, MarkCritical) is obeyed from
	// the first call. Default 10; at most 16; negative: no minimum.
	MinBeforeCalls int
	// MaxSuccessDrop is the largest tolerated fall of the success rate,
	// in percentage points. Default 10; at most 100; negative, NaN or
	// +Inf: off.
	MaxSuccessDrop float64
	// MaxLatencyRise is the largest tolerated rise of the average latency,
	// in percent. Default 20; at most 10,000 (a hundredfold); negative,
	// NaN or +Inf: off.
	MaxLatencyRise float64
	// MinLatencyRise is the absolute floor below which a latency rise never
	// rolls back, so that microsecond noise on fast calls is ignored.
	// Default 1ms; at most 24 hours.
	MinLatencyRise time.Duration
	// MaxLatencyRiseOnGain is the largest tolerated rise of the successful
	// calls' average latency, in percent, for a change that raised the
	// success rate significantly. Default 400 (five times as slow): a
	// doubled backoff with one more attempt can triple it. At most
	// 10,000; negative, NaN or +Inf: off.
	MaxLatencyRiseOnGain float64
	// MaxConsecutiveFailures under the new version roll back at once,
	// without waiting for MinCalls. Default 5; at most 1,000,000;
	// negative: off.
	MaxConsecutiveFailures int

	// FalseRollbacks is the sequential test's nominal rate of rolling
	// back a change that did not lower the success rate (its α). The rate
	// achieved differs, as the reference rate is itself an estimate (see
	// docs/performance.md). Default 0.05 under MethodQuick, 0.004 under
	// MethodSequential; in [0, 1).
	FalseRollbacks float64
	// MissedRollbacks is the sequential test's nominal rate of confirming
	// a change that lowered the success rate by twice MaxSuccessDrop (its
	// β). Default 0.02; in [0, 1).
	MissedRollbacks float64
	// MaxCalls is the most calls the sequential tests and MethodFixed wait
	// for: a change not rolled back by then is judged on latency and
	// confirmed. Default 100; at most 1,000,000.
	MaxCalls int
	// BackstopCalls is when every method's backstop test runs: once a
	// change has run this many calls under verification (of both arms,
	// under MethodCanary), its failures are compared with the reference
	// before it, the reference's own uncertainty included, and a count
	// that reference gives in at most 1 % of cases rolls it back.
	// MethodQuick and MethodSequential end their test there (a
	// change not rolled back is judged on latency); MethodFixed confirms
	// there a change it did not roll back on MinCalls calls; MethodCanary
	// applies it on every call from there while it compares its arms.
	// Default 60, between MinCalls and MaxCalls; at most 1,000,000;
	// negative: off (and off under SeedCompatible).
	BackstopCalls int

	// RefuseFor is how long a rolled-back tweak is refused (for the
	// cluster it addressed): long enough that a strategy does not try it
	// again and again, short enough that a tweak judged during an outage
	// can fix a later fault. Default 24 hours; at most 366 days;
	// negative: until ClearRejected.
	RefuseFor time.Duration

	// CanaryFraction is the share of calls MethodCanary runs under the
	// previous config while a change is verified. Default 0.1; at most 0.5.
	CanaryFraction float64
	// CanaryCalls is how many calls of the previous config MethodCanary
	// waits for before it confirms a change. Default 2×MinCalls; at most
	// 1,000,000.
	CanaryCalls int
	// MaxCostRise is the largest tolerated rise of the cost per
	// successful call (see AddCost), in percent, for a change that brings
	// no significant gain in quality or success: a change that raises it
	// more is rolled back once both configs have 20 calls with a cost
	// (see docs/quality.md). Default 20; at most 10,000; negative, NaN or
	// +Inf: off.
	MaxCostRise float64
	// QualityDrop is how far the mean score of the config in force
	// must fall, below its established mean, to start an analysis as
	// failures do, once per QualityCooldown: an anytime-valid test of
	// its recent scores at a false-alarm rate of one in 1,000 scored
	// calls (see docs/quality.md). Default DefaultQualityDrop (0.05); at
	// most 1; negative, NaN or +Inf: off.
	QualityDrop float64
	// QualityCooldown is the least time between two analyses started by
	// a fall of quality. Default 1 hour; at most 366 days.
	QualityCooldown time.Duration

	// ProposeOnly makes the loop file every tweak a strategy proposes as
	// a Proposal (as Tweak.Review does), with its analysis, instead of
	// applying it: a person approves it (Loop.Approve), and an approved
	// one is verified like any change. Default false.
	ProposeOnly bool
	// ProposeCostRise also files a change MaxCostRise alone rolls back as
	// a Proposal (CostRise) to apply it again; approved, it is verified
	// but not on cost (Change.CostAccepted; docs/quality.md). Default
	// false: rolled back and refused like any other.
	ProposeCostRise bool

	// CanarySeed seeds the choice of the calls that run the previous
	// config: with the same seed, the same sequence of calls runs the same
	// arms. Default 0.
	CanarySeed uint64
}

// Method is how a RollbackPolicy weighs the evidence about a change.
type Method uint8

// The methods.
const (
	// MethodQuick, the default, runs a sequential probability ratio test
	// on the success of each call under the change, with H0 "the success
	// rate is p0" against H1 "it is p0 less twice MaxSuccessDrop points".
	// p0 is the analysis window's rate while "before" agrees with it
	// (within three standard errors), and otherwise "before"'s rate shrunk
	// toward the window's with the weight of 4 calls; at most 0.99. It
	// rolls back as soon as the likelihood ratio reaches
	// (1-MissedRollbacks)/FalseRollbacks. When it falls to
	// MissedRollbacks/(1-FalseRollbacks) after at least MinCalls calls, or
	// at MaxCalls calls, the latency rule decides between roll back and
	// confirm. Its error rates default to 5 % and 2 %.
	MethodQuick Method = iota
	// MethodSequential is MethodQuick's test with stricter default error
	// rates: FalseRollbacks 0.4 %, MissedRollbacks 2 %.
	MethodSequential
	// MethodCanary runs CanaryFraction of the calls under the previous
	// config while a change is verified (Report.Arm says which) and compares
	// the two arms over the same period, so that an upstream change that
	// hits both is not blamed on the change. Once each arm has MinCalls
	// calls, it rolls back when the change's success rate is more than
	// MaxSuccessDrop points below the previous config's and the gap is
	// three standard errors wide; when the previous config has run
	// CanaryCalls calls, the latency rule decides between roll back and
	// confirm. Its early rule for clearly harmful changes and its
	// backstop compare the change's calls with the reference before the
	// change, leaving out a run of failures during which the previous
	// config failed too, and not at all when the previous config's calls
	// fail more than that reference explains.
	MethodCanary
	// MethodFixed compares MinCalls calls under the change with the
	// recent regime before it, by fixed thresholds, on the MinCalls-th
	// call; a change it keeps is confirmed, or rolled back, by the
	// backstop on the BackstopCalls-th.
	MethodFixed
)

// The bounds of RollbackPolicy's fields.
const (
	// maxPolicyCalls bounds the counts of calls: MinCalls, MaxCalls,
	// BackstopCalls, CanaryCalls, MaxConsecutiveFailures.
	maxPolicyCalls = 1_000_000
	// maxSuccessDrop bounds MaxSuccessDrop, in percentage points.
	maxSuccessDrop = 100
	// maxLatencyPct bounds MaxLatencyRise and MaxLatencyRiseOnGain, in
	// percent: a hundredfold.
	maxLatencyPct = 10_000
	// maxLatencyFloor bounds MinLatencyRise.
	maxLatencyFloor = 24 * time.Hour
	// maxRefuseFor bounds RefuseFor: a refusal's end is stored.
	maxRefuseFor = 366 * 24 * time.Hour
)

// validate checks the fields against their documented ranges: a zero
// field takes its default, a negative (or NaN, or +Inf) MaxSuccessDrop,
// MaxLatencyRise or MaxLatencyRiseOnGain, or a negative
// MaxConsecutiveFailures, MinBeforeCalls, BackstopCalls or RefuseFor turns
// its rule off, and anything else out of range is an error naming the
// field.
func (p RollbackPolicy) validate() error {
	if p.Method > MethodFixed {
		return fieldErr("Method", "%d, unknown", int(p.Method))
	}
	return firstErr(
		inRange("MinCalls", p.MinCalls, 0, maxPolicyCalls),
		inRange("BeforeCalls", p.BeforeCalls, 0, maxBeforeCalls),
		atMost("MinBeforeCalls", p.MinBeforeCalls, maxBeforeCalls),
		limit("MaxSuccessDrop", p.MaxSuccessDrop, maxSuccessDrop),
		limit("MaxLatencyRise", p.MaxLatencyRise, maxLatencyPct),
		inRange("MinLatencyRise", p.MinLatencyRise, 0, maxLatencyFloor),
		limit("MaxLatencyRiseOnGain", p.MaxLatencyRiseOnGain, maxLatencyPct),
		atMost("MaxConsecutiveFailures", p.MaxConsecutiveFailures, maxPolicyCalls),
		probability("FalseRollbacks", p.FalseRollbacks),
		probability("MissedRollbacks", p.MissedRollbacks),
		inRange("MaxCalls", p.MaxCalls, 0, maxPolicyCalls),
		atMost("BackstopCalls", p.BackstopCalls, maxPolicyCalls),
		atMost("RefuseFor", p.RefuseFor, maxRefuseFor),
		inRange("CanaryFraction", p.CanaryFraction, 0, maxCanaryFraction),
		inRange("CanaryCalls", p.CanaryCalls, 0, maxPolicyCalls),
		limit("MaxCostRise", p.MaxCostRise, maxLatencyPct),
		limit("QualityDrop", p.QualityDrop, 1),
		inRange("QualityCooldown", p.QualityCooldown, 0, maxRefuseFor),
	)
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
		p.BeforeCalls = maxBeforeCalls
	}
	p.BeforeCalls = min(p.BeforeCalls, maxBeforeCalls)
	switch {
	case p.SeedCompatible || p.MinBeforeCalls < 0:
		p.MinBeforeCalls = -1 // off, and stays off when defaults are filled again
	case p.MinBeforeCalls == 0:
		p.MinBeforeCalls = DefaultMinBeforeCalls
	}
	p.MinBeforeCalls = min(p.MinBeforeCalls, maxBeforeCalls)
	if p.MaxLatencyRiseOnGain == 0 {
		p.MaxLatencyRiseOnGain = DefaultMaxLatencyRiseOnGain
	}
	if p.RefuseFor == 0 {
		p.RefuseFor = DefaultRefuseFor
	}
	if p.MaxSuccessDrop == 0 {
		p.MaxSuccessDrop = DefaultMaxSuccessDrop
	}
	if p.MaxLatencyRise == 0 {
		p.MaxLatencyRise = DefaultMaxLatencyRise
	}
	if p.MaxCostRise == 0 {
		p.MaxCostRise = DefaultMaxCostRise
	}
	if p.QualityDrop == 0 {
		p.QualityDrop = DefaultQualityDrop
	}
	if p.QualityCooldown == 0 {
		p.QualityCooldown = DefaultQualityCooldown
	}
	if p.MinLatencyRise == 0 {
		p.MinLatencyRise = DefaultMinLatencyRise
	}
	if p.MaxConsecutiveFailures == 0 {
		p.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	fr, mr := DefaultFalseRollbacks, DefaultMissedRollbacks
	if p.Method == MethodQuick {
		fr, mr = QuickFalseRollbacks, QuickMissedRollbacks
	}
	if !(p.FalseRollbacks > 0 && p.FalseRollbacks < 1) {
		p.FalseRollbacks = fr
	}
	if !(p.MissedRollbacks > 0 && p.MissedRollbacks < 1) {
		p.MissedRollbacks = mr
	}
	if p.MaxCalls <= 0 {
		p.MaxCalls = DefaultSequentialMaxCalls
	}
	p.MaxCalls = max(p.MaxCalls, p.MinCalls)
	switch {
	case p.SeedCompatible || p.BackstopCalls < 0:
		p.BackstopCalls = -1 // off, and stays off when defaults are filled again
	case p.BackstopCalls == 0:
		p.BackstopCalls = DefaultBackstopCalls
	}
	if p.BackstopCalls > 0 {
		p.BackstopCalls = min(max(p.BackstopCalls, p.MinCalls), p.MaxCalls)
	}
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
// Calls, Failures, TotalLatency and SuccessLatency, of After also
// ConsecutiveFailures, and of Before and After the quality and cost
// figures (Scored, Quality, QualitySD, Costed, CostPerSuccess);
// MethodCanary also uses Window's ConsecutiveFailures, the run of
// failures the change was made in.
type Evidence struct {
	// Before is the reference: the recent regime when the change was
	// applied (the analysis window under SeedCompatible).
	Before Stats
	// Window is the analysis window's stats when the change was applied;
	// the sequential tests pool Before with it, or shrink Before's success
	// rate toward its rate. Its ConsecutiveFailures is the run of failures
	// under way when the change was applied.
	Window Stats
	// After counts the calls that ran under the change.
	After Stats
	// Control counts the calls that ran under the previous config while
	// the change was verified (MethodCanary only).
	Control Stats
	// StreakControl counts the calls of the previous config during the
	// change's current run of consecutive failures, between two of its
	// failures (MethodCanary only): a success among them lays the run on
	// the change. One after the run's latest failure counts only once the
	// change fails again: the first call after an outage both configs
	// shared may be the previous config's.
	StreakControl Stats
	// Raised says the change raised a bound of the call: a longer
	// Timeout, more attempts or a longer Backoff. Comparable then counts
	// (as Calls and TotalLatency) the change's successes the previous
	// config would have served alike: those on their first attempt, within
	// the previous Timeout when the Timeout was raised. The latency rule
	// compares them alone with the successes before.
	Raised     bool
	Comparable Stats
	// Exploring says the change explores a candidate (see Exploration):
	// it is confirmed only with a gain in cost, quality or success.
	Exploring bool
	// Repairs says the change was made to repair a fall of quality (see
	// RollbackPolicy.QualityDrop): a rise of its cost or of its latency
	// is weighed only once the quality test has had its say on the gain
	// it was made for, and that gain, shown, excuses it (the latency up
	// to MaxLatencyRiseOnGain percent).
	Repairs bool
}

// like is the change's successes the latency rule compares, when it
// raised a bound; nil otherwise (see rollback_latency.go).
func (e *Evidence) like(p RollbackPolicy) *Stats {
	if !e.Raised || p.SeedCompatible {
		return nil
	}
	return &e.Comparable
}

// Decide judges a change by one rule over success, latency, quality and
// cost (docs/quality.md, "How a change is judged"): p's Method on
// success and latency, then quality and cost when the Evidence has
// scores or costs. It is a pure function.
func (p RollbackPolicy) Decide(e Evidence) Verdict {
	p = p.withDefaults()
	return p.withQuality(e, p.decide(e))
}

// decide judges a change on success and latency by p's Method; p has its
// defaults.
func (p RollbackPolicy) decide(e Evidence) Verdict {
	switch p.Method {
	case MethodQuick, MethodSequential:
		return p.sequential(e)
	case MethodCanary:
		return p.canary(e)
	}
	before, note := p.withPrior(e)
	if p.BackstopCalls > 0 && on(p.MaxSuccessDrop) && (e.Before.Calls > 0 || e.Window.Calls > 0) {
		return p.twoStage(e, before, note)
	}
	v := p.fixedRule(before, e.Before, e.After, e.like(p))
	if v.Decision != DecisionWait {
		v.Reason += note
	}
	return v
}

// Judge decides about a change by the fixed rule, whatever p's Method,
// from the stats before it and the stats of the calls under it. It is a
// pure function.
func (p RollbackPolicy) Judge(before, after Stats) Verdict {
	return p.withDefaults().fixed(before, after)
}

// consecutive rolls back after limit consecutive failures (never when
// limit is not positive), or more when the reference failure rate q0
// makes limit of them in a row likely: as many as make such a run less
// likely than runOdds, at most 4×limit. A reference that fails at least
// half the time is an outage: the change can hardly do worse, and limit
// failures in a row roll it back as a broken one. It returns the run's
// limit; runVerdict words the rollback (only then: a wait allocates
// nothing).
func consecutive(after Stats, limit int, q0 float64) (int, bool) {
	if limit <= 0 {
		return 0, false
	}
	need := limit
	if q0 > 0 && q0 < 0.5 {
		need = min(max(limit, verdict.RunLength(q0, runOdds)), 4*limit)
	}
	return need, after.ConsecutiveFailures >= need
}

// runVerdict is the rollback after a run of at least need consecutive
// failures; vs ends its plain sentence: what the failures compare with.
func runVerdict(after Stats, need int, vs string) Verdict {
	return Verdict{DecisionRollback, fmt.Sprintf("%s, %s; %d consecutive failures (limit %d)",
		failedWords(after, true), vs, after.ConsecutiveFailures, need)}
}

// on reports whether a threshold turns its rule on: positive and finite.
func on(f float64) bool { return f > 0 && !math.IsInf(f, 1) }

// dropExceeds reports whether the success rate fell from before to after
// by more than pts percentage points, exactly.
func dropExceeds(before, after Stats, pts float64) bool { return dropCmp(before, after, pts) > 0 }

// dropIs reports whether the success rate fell from before to after by
// exactly pts percentage points.
func dropIs(before, after Stats, pts float64) bool { return dropCmp(before, after, pts) == 0 }

func dropCmp(before, after Stats, pts float64) int {
	return verdict.CompareDrop(before.Calls-before.Failures, before.Calls, after.Calls-after.Failures, after.Calls, pts)
}

// latencyExceeds reports whether the average latency rose from before to
// after by more than pct percent and by at least floor, exactly.
func latencyExceeds(before, after Stats, pct float64, floor time.Duration) bool {
	return verdict.LatencyExceeds(before.TotalLatency, before.Calls, after.TotalLatency, after.Calls, pct, floor)
}

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
