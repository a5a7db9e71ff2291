package selfimprove

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The checks of the values callers hand the loop (configs, options,
// policies, tweaks): each refusal names the field, as in
// "config.backoff: 100h0m0s, more than 1h". They are leaves, used by the
// rules' files as well as the Loop's.

// fieldErr is the refusal of field: "field: " and the formatted reason.
func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// inRange refuses v outside [lo, hi], and NaN. A negative v below lo 0 is
// called negative.
func inRange[T int | time.Duration | float64](field string, v, lo, hi T) error {
	switch {
	case v < lo && lo == 0:
		return fieldErr(field, "%v, negative", v)
	case v < lo:
		return fieldErr(field, "%v, less than %s", v, showBound(lo))
	case v > hi:
		return fieldErr(field, "%v, more than %s", v, showBound(hi))
	case isNaN(v):
		return fieldErr(field, "NaN, not a number")
	}
	return nil
}

func isNaN(v any) bool {
	f, ok := v.(float64)
	return ok && math.IsNaN(f)
}

// positive refuses d unless it is positive.
func positive(field string, d time.Duration) error {
	if d <= 0 {
		return fieldErr(field, "%v, not positive", d)
	}
	return nil
}

// atMost refuses v above hi; any lower value is allowed (a negative one
// turns a rule off).
func atMost[T int | time.Duration](field string, v, hi T) error {
	if v > hi {
		return fieldErr(field, "%v, more than %s", v, showBound(hi))
	}
	return nil
}

// limit refuses a finite threshold above hi. A negative, NaN or +Inf one
// turns its rule off, and is allowed.
func limit(field string, v, hi float64) error {
	if v > hi && !math.IsInf(v, 1) {
		return fieldErr(field, "%v, more than %v (negative or +Inf: off)", v, hi)
	}
	return nil
}

// probability refuses v outside [0, 1), and NaN.
func probability(field string, v float64) error {
	if !(v >= 0 && v < 1) {
		return fieldErr(field, "%v, not in [0, 1)", v)
	}
	return nil
}

// checkText refuses a text longer than max bytes, or not UTF-8: JSON,
// which stores it, would not give it back as it was.
func checkText(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fieldErr(field, "%d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return fieldErr(field, "%s is not valid UTF-8", quoteCut(s, maxQuoted))
	}
	return nil
}

// firstErr returns the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// showBound writes a bound: a duration without its zero minutes and
// seconds ("1h", "24h", "8784h").
func showBound(v any) string {
	if d, ok := v.(time.Duration); ok {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	return fmt.Sprint(v)
}

// maxQuoted is how many bytes of a caller's text a message or a log line
// shows: an agent ID, a parameter's name.
const maxQuoted = 64

// quoteCut returns s quoted as Go quotes a string, cut to its first n
// bytes (at a rune start, when one is within 3 bytes), followed by "…"
// when cut. The result is at most 4n+5 bytes: a byte that is not UTF-8 is
// written \xNN.
func quoteCut(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > n-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 there: a plain cut
	}
	return strconv.Quote(s[:cut]) + "…"
}

// checkAgentID refuses an empty ID, and one longer than MaxAgentIDLen.
func checkAgentID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidAgentID)
	case len(id) > MaxAgentIDLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidAgentID, len(id), MaxAgentIDLen)
	}
	return nil
}

// maxFrom bounds the agent ID a cluster keeps in Cluster.From.
const maxFrom = 128

// boundFrom is an agent ID as Cluster.From keeps it: cut to maxFrom bytes.
func boundFrom(id string) string {
	return failure.Bound(id, maxFrom)
}

// maxReason caps, in bytes, each free text the loop stores from a
// strategy, a policy or an operator: a Tweak's Reason as kept in a Change
// (Reason, Verdict), in the rejected tweaks and in a Fix of the failure
// memory, and a Proposal's Rationale, Rule, Signature and Note. A longer
// text is cut by Bound, after failure.Scrub (freeText).
const maxReason = 512

// freeText is a free text from a strategy, a policy or an operator as the
// loop keeps it: scrubbed of secrets like an error's text (failure.Scrub),
// then cut to maxReason bytes by failure.Bound.
func freeText(s string) string { return failure.Bound(failure.Scrub(s), maxReason) }

// loopText is a text the loop composed of its own words and of texts
// already scrubbed (a failure's Text, a reason kept before), cut as
// freeText cuts. It is not scrubbed again: the scrubber would read the
// loop's words as a secret's key ("auth: agent …") and redact the word
// after them.
func loopText(s string) string { return failure.Bound(s, maxReason) }

// boundTexts returns the first n texts of ss, each cut by failure.Bound
// to each bytes: a new slice, nil when there are none.
func boundTexts(ss []string, n, each int) []string {
	var out []string
	for _, s := range ss[:min(len(ss), max(n, 0))] {
		out = append(out, failure.Bound(s, each))
	}
	return out
}
