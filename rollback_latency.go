package selfimprove

import (
	"fmt"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// The latency rule, and what a change changes.
//
// A change that raises a bound of the call (a longer Timeout, more
// attempts, a longer Backoff) lets calls succeed that failed before, and
// they succeed later by design: a call that needed 120 ms now succeeds in
// 120 ms instead of failing at 100, a call that needed a retry succeeds
// after the backoff. The average of all successes rises with them, the
// more the faster the calls that succeeded before: a timeout raise from
// 100 to 150 ms over calls of 5–10 ms multiplies it by four or more. That
// rise is the fix's expected cost, bounded by the new config, not a
// regression. What such a change may not do is slow the calls it has in
// common with the previous config: so it is judged on success, and on
// latency by the successes the previous config would have served alike
// (counted as they happen, see servedAlike), compared with the successes
// before it; a rise of their average of more than MaxLatencyRise percent
// (and at least MinLatencyRise) rolls it back whatever the success rate
// did, as the calls that gained cannot explain it.

// gainSlack is how many times MaxLatencyRise the successes a change
// raising a bound shares with the previous config may slow down when the
// change raised the success rate significantly: their average over a few
// calls is noisy, and a fix is worth a little noise, not a slowdown.
const gainSlack = 2.5

// raisesBound reports whether to, replacing from, raised a bound of the
// call: a longer Timeout (or none where from had one), more attempts, or
// a longer Backoff.
func raisesBound(from, to Config) bool {
	return raisesTimeout(from, to) || to.attempts() > from.attempts() || to.Backoff > from.Backoff
}

// raisesTimeout reports whether to, replacing from, raised the Timeout:
// a longer one, or none where from had one.
func raisesTimeout(from, to Config) bool {
	return from.Timeout > 0 && (to.Timeout > from.Timeout || to.Timeout <= 0)
}

// servedAlike reports whether a successful call under to, replacing
// from, that took attempts attempts and lasted dur, is one from would
// have served the same way and as fast: on its first attempt (a retried
// success waited a backoff the change may have lengthened, after
// attempts the change may have added or lengthened), and within from's
// Timeout when to raised it. The successes before the change include
// retried ones: a bias toward keeping the change, never toward rolling
// it back.
func servedAlike(from, to Config, attempts int, dur time.Duration) bool {
	return attempts == 1 && (!raisesTimeout(from, to) || dur <= from.Timeout)
}

// latency ends verification by the latency rule, and confirms otherwise;
// note qualifies the confirmation. It compares the successful calls'
// average latency (all calls' where successes were not counted apart): a
// rise of more than MaxLatencyRise percent and at least MinLatencyRise
// rolls back, unless the success rate rose significantly and the rise is
// at most MaxLatencyRiseOnGain percent; the rise is judged against
// gainRef's rate. Under SeedCompatible, all calls' average latency is
// compared and a rise rolls back whatever the success rate did. like,
// when not nil, is the change's successes the previous config would have
// served alike, for a change that raised a bound (see above): they alone
// are compared with before's successes, and a significant rise of the
// success rate tolerates a rise of at most gainSlack times
// MaxLatencyRise percent of them (at most MaxLatencyRiseOnGain). where
// says, for the verdict's plain sentence, what before is: "before", or
// the previous config's calls in the same period.
func (p RollbackPolicy) latency(before, after, gainRef Stats, like *Stats, where, note string) Verdict {
	if p.SeedCompatible {
		b, a := avg(before), avg(after)
		if before.Calls > 0 && on(p.MaxLatencyRise) && latencyExceeds(before, after, p.MaxLatencyRise, p.MinLatencyRise) {
			return Verdict{DecisionRollback, fmt.Sprintf("%s; average latency rose %.1f%%, more than %g%%",
				slowerWords("calls", a, b, where), verdict.RisePct(b, a), p.MaxLatencyRise)}
		}
		return p.confirm(before, after, b, a, before.Calls > 0, where, note)
	}
	bo, ao, what, noun := okStats(before), okStats(after), "successful calls' average latency", "successful calls"
	if bo.Calls != before.Calls-before.Failures || ao.Calls != after.Calls-after.Failures {
		what, noun = "average latency", "calls"
	}
	onGain := p.MaxLatencyRiseOnGain
	if like != nil {
		ao, what, noun = *like, fmt.Sprintf("the average latency of the %d successes the previous config would have served alike", like.Calls), "successful calls"
		if onGain = gainSlack * p.MaxLatencyRise; on(p.MaxLatencyRiseOnGain) {
			onGain = min(onGain, p.MaxLatencyRiseOnGain)
		}
	}
	b, a := avg(bo), avg(ao)
	if bo.Calls > 0 && ao.Calls > 0 && on(p.MaxLatencyRise) && latencyExceeds(bo, ao, p.MaxLatencyRise, p.MinLatencyRise) {
		z := verdict.GainScore(gainRef.Calls, gainRef.Failures, after.Calls, after.Failures)
		gained := rate(after) > rate(gainRef) && z >= gainZ
		if !gained && rate(after) > rate(gainRef) && after.Calls < p.MaxCalls {
			// Success rose, not yet significantly: more calls decide.
			return Verdict{Decision: DecisionWait}
		}
		slower := slowerWords(noun, a, b, where)
		if !gained {
			return Verdict{DecisionRollback, fmt.Sprintf("%s; %s rose %.1f%%, more than %g%%",
				slower, what, verdict.RisePct(b, a), p.MaxLatencyRise)}
		}
		if on(onGain) && latencyExceeds(bo, ao, onGain, p.MinLatencyRise) {
			return Verdict{DecisionRollback, fmt.Sprintf("%s, more than a fix that raised the success rate %.1f points may cost; %s rose %.1f%%, more than %g%%",
				slower, 100*(rate(after)-rate(gainRef)), what, verdict.RisePct(b, a), onGain)}
		}
		note += fmt.Sprintf("; %s rose %.1f%%, kept because success rose %.1f points (%.1f standard errors)",
			what, verdict.RisePct(b, a), 100*(rate(after)-rate(gainRef)), z)
	} else if like != nil && bo.Calls > 0 && ao.Calls > 0 {
		note += fmt.Sprintf("; latency judged by the %d successes the previous config would have served alike: %v (was %v)", like.Calls, a, b)
	}
	return p.confirm(before, after, b, avg(okStats(after)), bo.Calls > 0, where, note)
}

// confirm is the confirmation verdict, with the average latencies b and
// a as compared (measured: b was measured, on calls before that count);
// where says what before is ("before").
func (p RollbackPolicy) confirm(before, after Stats, b, a time.Duration, measured bool, where, note string) Verdict {
	if before.Calls <= 0 {
		return Verdict{DecisionConfirm, okWords(after, before, where) + note}
	}
	return Verdict{DecisionConfirm, fmt.Sprintf("%s; %s%s", okWords(after, before, where), latencyWas(a, b, measured), note)}
}

// okStats is s's successful calls, as Calls and TotalLatency; s itself
// when their latency was not counted apart (SuccessLatency is 0 while
// some calls failed and some succeeded).
func okStats(s Stats) Stats {
	ok := s.Calls - s.Failures
	switch {
	case s.Failures == 0:
		return s
	case s.SuccessLatency > 0 || ok == 0:
		return Stats{Calls: ok, TotalLatency: s.SuccessLatency}
	}
	return s
}
