package selfimprove

import (
	"fmt"
	"strings"
	"time"
)

// Verdicts in plain words. Each verdict's reason starts with one sentence
// a person reads at a glance, up to its first "; ", saying what happened
// to the calls ("9 of the 10 calls under v2 failed, against 1 in 10
// before"); the statistics the rule decided by follow it. Decide, a pure
// function, says "under the change"; the loop names the version in its
// place (namedVerdict).

// underChange is how a verdict names the change's calls; namedVerdict
// replaces its first occurrence by the version.
const underChange = "under the change"

// namedVerdict is reason with its first "under the change" naming the
// change's version, as the loop stores it.
func namedVerdict(reason string, version int) string {
	return strings.Replace(reason, underChange, fmt.Sprintf("under v%d", version), 1)
}

// countOf is k of n calls, as the subject of a sentence: "all 9 calls",
// "none of the 10 calls", "3 of the 10 calls"; "the only call" for one,
// whose caller words what it did.
func countOf(k, n int) string {
	switch {
	case n == 1:
		return "the only call"
	case k == n && n == 2:
		return "both calls"
	case k == n:
		return fmt.Sprintf("all %d calls", n)
	case k == 0:
		return fmt.Sprintf("none of the %d calls", n)
	}
	return fmt.Sprintf("%d of the %d calls", k, n)
}

// refOf is k of n calls a verdict compares with: "1 in 10", "none of
// the 15", "all 3".
func refOf(k, n int) string {
	switch {
	case n == 1 && k == 0:
		return "none of the one"
	case n == 1:
		return "the only one"
	case k == 0:
		return fmt.Sprintf("none of the %d", n)
	case k == n:
		return fmt.Sprintf("all %d", n)
	}
	return fmt.Sprintf("%d in %d", k, n)
}

// failedWords says how many of a's calls failed: "all 9 calls under the
// change failed", or, for a run of failures that is not all of them,
// "the last 9 calls under the change failed in a row".
func failedWords(a Stats, run bool) string {
	if run && a.ConsecutiveFailures < a.Calls {
		return fmt.Sprintf("the last %d calls %s failed in a row", a.ConsecutiveFailures, underChange)
	}
	if a.Calls == 1 {
		return "the only call " + underChange + " failed"
	}
	return fmt.Sprintf("%s %s failed", countOf(a.Failures, a.Calls), underChange)
}

// vsFailed compares with ref's failures, where: "against 1 in 10
// before", or "with no calls before to compare with".
func vsFailed(ref Stats, where string) string {
	switch {
	case ref.Calls <= 0:
		return "with no calls before to compare with"
	case ref.Failures == ref.Calls:
		return fmt.Sprintf("as did %s %s: it fixed nothing", refOf(ref.Failures, ref.Calls), where)
	}
	return fmt.Sprintf("against %s %s", refOf(ref.Failures, ref.Calls), where)
}

// okWords says how many of a's calls succeeded, compared with ref's,
// where: "all 10 calls under the change succeeded, against none of the
// 15 before".
func okWords(a, ref Stats, where string) string {
	s := fmt.Sprintf("%s %s succeeded", countOf(a.Calls-a.Failures, a.Calls), underChange)
	if a.Calls == 1 && a.Failures == 1 {
		s = "the only call " + underChange + " failed"
	}
	if ref.Calls <= 0 {
		return s + ", with no calls before to compare with"
	}
	return fmt.Sprintf("%s, against %s %s", s, refOf(ref.Calls-ref.Failures, ref.Calls), where)
}

// fellWords is the plain sentence of a rollback on success: a's
// failures against the reference's (see vsRef).
func fellWords(a Stats, e Evidence) string {
	return failedWords(a, false) + ", " + vsRef(e)
}

// vsRef compares with the failures before the change, or in the
// analysis window when no call ended before it.
func vsRef(e Evidence) string {
	if e.Before.Calls <= 0 && e.Window.Calls > 0 {
		return vsFailed(e.Window, "in the analysis window")
	}
	return vsFailed(e.Before, "before")
}

// slowerWords is the plain sentence of a rollback on latency: what
// calls under the change took on average, against b where.
func slowerWords(what string, a, b time.Duration, where string) string {
	return fmt.Sprintf("%s %s were slower: %v on average, against %v %s", what, underChange, a, b, where)
}

// latencyWas is the average latency a, with b before when there was a
// figure before (measured: a call before that counts, a success where
// successes are timed apart); never "was 0s" for a figure never taken.
func latencyWas(a, b time.Duration, measured bool) string {
	if !measured {
		return fmt.Sprintf("average latency %v (no earlier figure)", a)
	}
	return fmt.Sprintf("average latency %v (was %v)", a, b)
}

// lastCalls is "the last call " or "the last n calls " followed by what
// they did.
func lastCalls(n int, did string) string {
	if n == 1 {
		return "the last call " + did
	}
	return fmt.Sprintf("the last %d calls %s", n, did)
}
