package selfimprove

import (
	"fmt"
	"math"
	"strings"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// Verification on quality and cost (docs/quality.md).
const (
	// qualityMinRef is the fewest scored calls of the config before a
	// change that make its quality the change's reference.
	qualityMinRef = 20
	// qualityAlpha is the level of the anytime-valid test that rolls a
	// change back when its mean score is below the reference's, lowered
	// by qualityZ standard errors of the reference's mean (its own
	// uncertainty).
	qualityAlpha = 0.03
	qualityZ     = 1.0
	// qualityMargin and qualityBeta: a change is confirmed on quality
	// once the same kind of test, at level qualityBeta, shows its mean
	// score above the reference's less qualityMargin, or once it has
	// qualityMaxScored scored calls.
	qualityMargin    = 0.10
	qualityBeta      = 0.02
	qualityMaxScored = 400
	// qualityWaitCalls times MaxCalls is the most calls a change waits
	// for the scores and costs it needs: then it is judged without them.
	qualityWaitCalls = 20
	// costMinCalls is the fewest calls with a cost, before the change and
	// under it, that the cost rule compares.
	costMinCalls = 20
)

// scoreSums returns the count, the sum and the sum of squares of s's
// scores.
func scoreSums(s Stats) (n int, sum, squares float64) {
	fn := float64(s.Scored)
	return s.Scored, s.Quality * fn, fn * (s.QualitySD*s.QualitySD + s.Quality*s.Quality)
}

// reference is the mean score a change's scores are tested against: the
// mean before it, moved by z standard errors of that mean.
func reference(before Stats, z float64) float64 {
	return before.Quality + z*before.QualitySD/math.Sqrt(float64(before.Scored))
}

// How a change is judged (docs/quality.md, "How a change is judged"):
// one rule over success, latency, quality and cost together. A change
// has an objective, the signal it was made for, which must be shown
// better or not worse; the other signals are guardrails, each shown not
// violated. While a test that may still decide is short of evidence, the
// verdict waits, at most as long as its row says; a guardrail shown
// violated rolls the change back, whatever the others say.
//
//	kind of change            objective                          a guardrail's rise it excuses
//	failure fix, route move,  success not worse (the Method);    latency, cost: a success gain
//	  operator change           a gain shown is better             (latency: to MaxLatencyRiseOnGain)
//	quality move (Repairs)    quality not worse; a gain shown    latency (to MaxLatencyRiseOnGain),
//	                            is better                          cost: a quality gain
//	explored candidate        a gain (exploreVerdict): cost      cost: a success or quality gain
//	  (Exploring)               10 % lower with quality shown
//	                            within 0.07, or quality, or
//	                            success
//
//	signal   violated when shown                  waits, at most            then
//	success  the Method's test                    MaxCalls                  the Method's rule
//	latency  average of successes up more than    success rising: MaxCalls; rolled back
//	           MaxLatencyRise % (MinLatencyRise)    a quality move: as its
//	                                                quality gain waits
//	quality  mean below the reference − 1 SE,     to be shown within 0.10   kept
//	           betting test at 3 %                  (2 %): 400 scored calls
//	                                                or 20 × MaxCalls calls
//	cost     cost per success up more than        20 costed calls each      kept
//	           MaxCostRise % (20 costed calls       (20 × MaxCalls); a
//	           each), no gain shown                 quality move: its gain,
//	                                                as quality waits
//	gain of  cheaper: quality shown within 0.07   400 scored calls or 200   rolled back
//	 explored  (2 %); else a quality gain (3 %)     × MaxCalls; no gain: 400
//	                                                scored or 20 × MaxCalls
//
// The success and latency rows are the Method's (decide); withQuality
// adds the rest.

// signal is where one test of the rule stands.
type signal int

const (
	pending  signal = iota // short of evidence, and may still decide
	held                   // shown not violated, or its wait is over
	violated               // shown violated
)

// withQuality completes v, the Method's verdict on success and latency,
// with the rest of the rule above: the quality and cost guardrails roll
// back a change v keeps, or hold a change v would confirm until they are
// in; a quality move's latency rise waits for its quality gain; an
// explored candidate needs its gain.
func (p RollbackPolicy) withQuality(e Evidence, v Verdict) Verdict {
	waited := e.After.Calls >= qualityWaitCalls*p.MaxCalls
	if v.Decision == DecisionRollback {
		if v = p.latencyForQuality(e, v, waited); v.Decision == DecisionRollback {
			return v
		}
	}
	q, why := p.qualityGuard(e, waited)
	if q == violated {
		return Verdict{DecisionRollback, why}
	}
	c, why, compared := p.costGuard(e, waited)
	if c == violated {
		return Verdict{DecisionRollback, why}
	}
	if v.Decision != DecisionConfirm {
		return v // the success test may still decide
	}
	if q == pending || c == pending {
		return Verdict{DecisionWait, ""}
	}
	// The notes are worded only now: a wait allocates nothing.
	if e.Before.Scored >= qualityMinRef {
		v.Reason += "; " + qualityVs(e.After, e.Before)
	}
	if compared {
		v.Reason += fmt.Sprintf("; cost per successful call %.4g against %.4g", e.After.CostPerSuccess, e.Before.CostPerSuccess)
	}
	if e.Exploring {
		return p.exploreVerdict(e, v, waited)
	}
	return v
}

// qualityGuard is the quality row of the rule: violated (with the
// rollback's reason) when the change's scores show their mean below the
// reference; held once they show it within qualityMargin, or after qualityMaxScored scored calls or the
// wait; pending before. A change whose reference has fewer than
// qualityMinRef scores is not judged on quality.
func (p RollbackPolicy) qualityGuard(e Evidence, waited bool) (signal, string) {
	if e.Before.Scored < qualityMinRef {
		return held, ""
	}
	n, sum, sq := scoreSums(e.After)
	if n > 0 && verdict.BelowMean(n, sum, sq, reference(e.Before, -qualityZ), qualityAlpha) {
		return violated, fmt.Sprintf("answers %s scored lower: %.3f on average, against %.3f before; mean quality fell from %.3f (%d scored calls) to %.3f (%d scored calls)",
			underChange, e.After.Quality, e.Before.Quality, e.Before.Quality, e.Before.Scored, e.After.Quality, e.After.Scored)
	}
	if !waited && n < qualityMaxScored && !verdict.AboveMean(n, sum, sq, reference(e.Before, qualityZ)-qualityMargin, qualityBeta) {
		return pending, ""
	}
	return held, ""
}

// costGuard is the cost row of the rule: violated (with the rollback's
// reason, see costRise), held, or pending while the costs are short or a
// quality move's gain that would excuse a rise may still be shown;
// compared says the costs were compared.
func (p RollbackPolicy) costGuard(e Evidence, waited bool) (s signal, reason string, compared bool) {
	reason, compared = p.costRise(e)
	switch {
	case reason != "":
		return violated, reason, true
	case !compared && e.Before.Costed >= costMinCalls && on(p.MaxCostRise) && !waited:
		return pending, "", false
	}
	return held, "", compared
}

// latencyForQuality takes v, the Method's rollback, of a change made to
// repair a fall of quality: when the latency rule alone rolled it back,
// it waits while the quality gain it was made for may still be shown (as
// long as quality waits), and a gain shown excuses a rise of up to
// MaxLatencyRiseOnGain percent, as a gain in success does. Any other
// rollback stands.
func (p RollbackPolicy) latencyForQuality(e Evidence, v Verdict, waited bool) Verdict {
	if !e.Repairs || !on(p.MaxLatencyRise) || e.Before.Scored < qualityMinRef {
		return v
	}
	q := p
	q.MaxLatencyRise = -1
	u := q.decide(e)
	if u.Decision == DecisionRollback {
		return v // not the latency rule's
	}
	n, sum, sq := scoreSums(e.After)
	if n == 0 || !verdict.AboveMean(n, sum, sq, reference(e.Before, qualityZ), qualityAlpha) {
		if !waited && n < qualityMaxScored {
			return Verdict{DecisionWait, ""}
		}
		return v
	}
	if q.MaxLatencyRise = p.MaxLatencyRiseOnGain; on(q.MaxLatencyRise) && q.decide(e).Decision == DecisionRollback {
		return v
	}
	if u.Decision == DecisionConfirm {
		u.Reason += fmt.Sprintf("; successful calls' average latency %v against %v before, kept for the gain in quality the move was made for",
			avg(okStats(e.After)), avg(okStats(e.Before)))
	}
	return u
}

// costRise returns the reason to roll back a change whose cost per
// successful call rose by more than MaxCostRise percent without a
// significant gain in quality or success ("" when there is none), and
// whether the costs before and under the change are enough to compare.
func (p RollbackPolicy) costRise(e Evidence) (string, bool) {
	b, a := e.Before, e.After
	if !on(p.MaxCostRise) || b.Costed < costMinCalls || a.Costed < costMinCalls || !(b.CostPerSuccess > 0) {
		return "", false
	}
	rise := (a.CostPerSuccess/b.CostPerSuccess - 1) * 100
	if !(rise > p.MaxCostRise) {
		return "", true
	}
	gain := verdict.GainScore(b.Calls, b.Failures, a.Calls, a.Failures)
	if w := e.Window; w.Calls > 0 {
		// A gain must hold against the analysis window too: a change
		// made after a few failures is no fix of an agent that rarely
		// fails.
		gain = min(gain, verdict.GainScore(w.Calls, w.Failures, a.Calls, a.Failures))
	}
	if gain >= gainZ {
		return "", true // a fix that turns failures into successes may cost more
	}
	n, sum, sq := scoreSums(a)
	if b.Scored >= qualityMinRef && n > 0 && verdict.AboveMean(n, sum, sq, reference(b, qualityZ), qualityAlpha) {
		return "", true // a better answer may cost more
	}
	if (e.Repairs || mayGain(e)) && n < qualityMaxScored && e.After.Calls < qualityWaitCalls*p.MaxCalls {
		// Made for quality, or a candidate explored that looks better:
		// its gain may still be shown.
		return "", false
	}
	return fmt.Sprintf("each success %s cost %.0f%% more, with no better answers or fewer failures to show for it; cost per successful call rose %.0f%% (%.4g to %.4g, %d and %d calls with a cost), more than %.4g%%, without a significant gain in quality or success",
		underChange, rise, rise, b.CostPerSuccess, a.CostPerSuccess, b.Costed, a.Costed, p.MaxCostRise), true
}

// exploreSaving is the least fall of the cost per successful call that
// is a gain for an explored candidate; exploreMinGain the least rise of
// its mean score worth waiting for: a candidate whose mean is shown
// below the reference's (raised by a standard error) plus exploreMinGain,
// by the betting test at qualityAlpha, is rolled back then (see
// Exploration).
const (
	exploreSaving  = 0.10
	exploreMinGain = 0.05
)

// gainScores is how many scored calls an explored candidate that costs
// more needs at its costMinCalls-th call with a cost for its mean to
// count as a sign of no gain (mayGain).
const gainScores = 5

// mayGain reports whether an explored candidate that costs more may
// still show a gain in quality worth its cost, so that the cost rule
// waits for the quality test rather than decide alone: the agent scores,
// the candidate is not shown short of exploreMinGain (shortOfGain, an
// anytime-valid test), and it did not look like no gain when the cost rule first
// compared (its costMinCalls-th call with a cost, the one look at its
// running mean: with gainScores scores or more, a mean below the
// reference's plus half exploreMinGain). So a candidate of equal
// quality that is scored on most calls goes at that call, as before,
// and one scored rarely waits for the test, as long as quality waits
// (costRise: qualityMaxScored scored calls, qualityWaitCalls × MaxCalls
// calls).
func mayGain(e Evidence) bool {
	b, a := e.Before, e.After
	if !e.Exploring || b.Scored < qualityMinRef || shortOfGain(e) {
		return false
	}
	return a.Costed > costMinCalls || a.Scored < gainScores || a.Quality >= b.Quality+exploreMinGain/2
}

// shortOfGain reports whether the explored candidate's mean score is
// shown below the reference's (raised by a standard error) plus
// exploreMinGain, by the betting test at qualityAlpha: it will not show
// a gain worth its cost.
func shortOfGain(e Evidence) bool {
	n, sum, sq := scoreSums(e.After)
	return n > 0 && verdict.BelowMean(n, sum, sq, reference(e.Before, qualityZ)+exploreMinGain, qualityAlpha)
}

// exploreVerdict takes v, a confirmation of a change that explores a
// candidate, and keeps it only with a gain (see Exploration): else it
// waits for the quality test, then rolls the change back; at once when
// the candidate is shown short of exploreMinGain.
func (p RollbackPolicy) exploreVerdict(e Evidence, v Verdict, waited bool) Verdict {
	b, a := e.Before, e.After
	if b.Costed >= costMinCalls && a.Costed >= costMinCalls && b.CostPerSuccess > 0 {
		if a.CostPerSuccess <= b.CostPerSuccess*(1-exploreSaving) {
			return cheaper(e, v, e.After.Calls >= cheaperWaitCalls*p.MaxCalls)
		}
	} else if b.Costed >= costMinCalls && !waited {
		return Verdict{DecisionWait, ""}
	}
	n, sum, sq := scoreSums(a)
	scored := b.Scored >= qualityMinRef
	gain := verdict.GainScore(b.Calls, b.Failures, a.Calls, a.Failures)
	if w := e.Window; w.Calls > 0 {
		gain = min(gain, verdict.GainScore(w.Calls, w.Failures, a.Calls, a.Failures))
	}
	if scored && n > 0 && verdict.AboveMean(n, sum, sq, reference(b, qualityZ), qualityAlpha) ||
		b.Failures+e.Window.Failures > 0 && gain >= gainZ {
		return v
	}
	// Successive elimination: a candidate shown short of the gain worth
	// having is let go as soon as that is shown, not after 400 scores.
	if scored && !waited && n < qualityMaxScored && !shortOfGain(e) {
		return Verdict{DecisionWait, ""}
	}
	return Verdict{DecisionRollback, fmt.Sprintf(noGainPrefix+"%s did no better than the config before it: no better answers, lower cost or fewer failures; the explored candidate brought no gain: %s, cost per successful call %.4g against %.4g, success rate %.3f against %.3f",
		underChange,
		qualityVs(a, b), a.CostPerSuccess, b.CostPerSuccess, a.SuccessRate, b.SuccessRate)}
}

// costQualityMargin is how much lower a cheaper candidate's mean score
// may be than the reference's for its saving to be taken;
// cheaperWaitCalls times MaxCalls is the most calls it waits for the
// scores that show it.
const (
	costQualityMargin = 0.07
	cheaperWaitCalls  = 10 * qualityWaitCalls
)

// cheaper takes v, a confirmation of an explored candidate that costs at
// least exploreSaving less: for an agent that scores none, the saving
// confirms it; else only once its mean score is shown above the
// reference's (raised by a standard error) less costQualityMargin, by
// the betting test at qualityBeta. It waits for that while the test may
// still decide (fewer than qualityMaxScored scored calls, until waited:
// cheaperWaitCalls × MaxCalls calls), then rolls the change back: a
// saving is never taken on cost alone when the agent scores.
func cheaper(e Evidence, v Verdict, waited bool) Verdict {
	b, a := e.Before, e.After
	if b.Scored == 0 && a.Scored == 0 {
		return v
	}
	n, sum, sq := scoreSums(a)
	if b.Scored >= qualityMinRef && n > 0 && verdict.AboveMean(n, sum, sq, reference(b, qualityZ)-costQualityMargin, qualityBeta) {
		v.Reason += fmt.Sprintf("; cost per successful call %.4g against %.4g, mean quality %.3f (%d scored calls) against %.3f (%d), within %.2f",
			a.CostPerSuccess, b.CostPerSuccess, a.Quality, a.Scored, b.Quality, b.Scored, costQualityMargin)
		return v
	}
	if !waited && n < qualityMaxScored {
		return Verdict{DecisionWait, ""}
	}
	return Verdict{DecisionRollback, fmt.Sprintf(noGainPrefix+"%s is cheaper, but its answers were not shown to be as good; the explored candidate costs less (%.4g against %.4g per successful call), but its quality was not shown within %.2f of the reference: %s",
		underChange, a.CostPerSuccess, b.CostPerSuccess, costQualityMargin, qualityVs(a, b))}
}

// qualityVs says how the mean score of the calls under a change (after)
// compares with the reference's (before), in words when no call under
// the change was scored: a mean of 0 over no call would read as a
// collapse.
func qualityVs(after, before Stats) string {
	ref := fmt.Sprintf("%.3f (%d scored calls)", before.Quality, before.Scored)
	if before.Scored == 0 {
		ref = "none scored before"
	}
	switch {
	case after.Scored == 0 && before.Scored == 0:
		return "no call was scored"
	case after.Scored == 0:
		return "no call under the change was scored (mean quality before: " + ref + ")"
	}
	return fmt.Sprintf("mean quality %.3f (%d scored calls) against %s", after.Quality, after.Scored, ref)
}

// noGainPrefix begins the reasons of the verdicts that roll back an
// explored candidate for bringing no gain (exploreVerdict, cheaper), not
// for harm.
const noGainPrefix = "the candidate explored "

// noGain reports whether v rolls back a change that explores a candidate
// for bringing no gain over the config while the agent was healthy:
// refused to explorations only (Tweak.Explored).
func noGain(e Evidence, v Verdict) bool {
	return e.Exploring && v.Decision == DecisionRollback && strings.HasPrefix(v.Reason, noGainPrefix)
}

// costOnly reports whether v, p's verdict on e, rolls the change back for
// its cost alone, and p files such a change for approval.
func (p RollbackPolicy) costOnly(e Evidence, v Verdict) bool {
	if !p.ProposeCostRise || v.Decision != DecisionRollback {
		return false
	}
	reason, _ := p.withDefaults().costRise(e)
	return reason != "" && reason == v.Reason
}
