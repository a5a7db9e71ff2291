package selfimprove

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
