package failure

import (
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Why the loop waited before an attempt (selfimprove.Attempt's
// WaitReason). HeaderWait, ErrorWait and TextWait find the server's
// waits; the loop adds the config's backoff.
const (
	WaitBackoff         = "backoff"          // the config's Backoff
	WaitHeader          = "header"           // a header of the failed response, seen by selfimprove.Transport; followed by " " and the header's name
	WaitErrorMethod     = "error RetryAfter" // an error in the chain with RetryAfter() time.Duration
	WaitProviderMessage = "provider message" // the provider's message: "Please try again in 1.5s"
	WaitNone            = ""                 // no wait
)

const (
	maxHintText = 2 * maxClassifyText // bytes of text searched for a wait
	maxHint     = 24 * time.Hour      // longer waits are not believed
)

// HeaderWait returns the wait a failed HTTP response asks for, and the
// header that says so, read in this order: retry-after-ms (milliseconds),
// retry-after (seconds, or an HTTP date, against now), then, on a 429
// only, the reset times of the exhausted rate limits:
// x-ratelimit-reset-requests and x-ratelimit-reset-tokens (OpenAI's
// durations, "1s", "6m0s", "20ms") and anthropic-ratelimit-*-reset (RFC
// 3339 times). Where a limit's remaining count is given, only a limit
// with none left counts; of those, the longest wait wins. It returns 0
// and "" when none applies, or the wait is negative or above a day.
func HeaderWait(h http.Header, status int, now time.Time) (time.Duration, string) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= float64(maxHint/time.Millisecond) {
			return time.Duration(f * float64(time.Millisecond)), "retry-after-ms"
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if f >= 0 && f <= float64(maxHint/time.Second) {
				return time.Duration(f * float64(time.Second)), "retry-after"
			}
		} else if t, err := http.ParseTime(v); err == nil {
			if d := t.Sub(now); d >= 0 && d <= maxHint {
				return d, "retry-after"
			}
			return 0, ""
		}
	}
	if status != http.StatusTooManyRequests {
		return 0, ""
	}
	var best time.Duration
	why := ""
	consider := func(name, remaining string, d time.Duration) {
		if r := strings.TrimSpace(h.Get(remaining)); r != "" && r != "0" {
			return
		}
		if d > best && d <= maxHint {
			best, why = d, name
		}
	}
	for _, k := range [...]string{"requests", "tokens"} {
		name := "x-ratelimit-reset-" + k
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				consider(name, "x-ratelimit-remaining-"+k, d)
			} else if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= float64(maxHint/time.Second) {
				consider(name, "x-ratelimit-remaining-"+k, time.Duration(f*float64(time.Second)))
			}
		}
	}
	for _, k := range [...]string{"requests", "tokens", "input-tokens", "output-tokens"} {
		name := "anthropic-ratelimit-" + k + "-reset"
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				consider(name, "anthropic-ratelimit-"+k+"-remaining", t.Sub(now))
			}
		}
	}
	return best, why
}

// TextWait returns the wait a provider's message asks for: the duration
// after "try again in", "retry after", "retry in" or "wait" ("Please try
// again in 1.5s", "6m0s", "20ms", "2 seconds"), or 0 when there is none.
// It reads the first 2 KiB of text.
func TextWait(text string) time.Duration {
	if len(text) > maxHintText {
		text = text[:maxHintText]
	}
	lower := strings.ToLower(text)
	var best time.Duration
	for _, p := range [...]string{"try again in ", "retry after ", "retry in ", "retry-after: ", "wait "} {
		for i := 0; i < len(lower); {
			j := strings.Index(lower[i:], p)
			if j < 0 {
				break
			}
			i += j + len(p)
			if d, ok := parseWait(lower[i:]); ok && d > best && d <= maxHint {
				best = d
			}
		}
	}
	return best
}

// parseWait reads a duration at the start of s: a Go duration ("1.5s",
// "6m0s"), or a number followed by a unit word ("2 seconds", "500
// milliseconds", "1 minute").
func parseWait(s string) (time.Duration, bool) {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || s[end] >= 'a' && s[end] <= 'z' || s[end] == 'µ') {
		end++
	}
	tok := strings.TrimRight(s[:end], ".")
	if tok == "" || tok[0] < '0' || tok[0] > '9' {
		return 0, false
	}
	if d, err := time.ParseDuration(tok); err == nil {
		return d, d >= 0
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return 0, false
	}
	rest := strings.TrimLeft(s[end:], " ")
	unit := time.Second
	switch {
	case strings.HasPrefix(rest, "ms"), strings.HasPrefix(rest, "millisecond"):
		unit = time.Millisecond
	case strings.HasPrefix(rest, "s"):
	case strings.HasPrefix(rest, "min"):
		unit = time.Minute
	default:
		return 0, false
	}
	if f*float64(unit) > float64(maxHint) {
		return 0, false
	}
	return time.Duration(f * float64(unit)), true
}

// ErrorWait returns the wait err asks for: that of the first error in its
// chain with a method RetryAfter() time.Duration that returns more than
// 0 (why is WaitErrorMethod), else the headers of the failed response an
// error in the chain keeps in a field Response *http.Response, as the
// openai-go and anthropic-sdk-go *Error do (HeaderWait, an HTTP date
// read against the system clock; why is WaitHeader, a space and the
// header's name), else the wait its provider
// body's message or, failing that, its text gives (TextWait; why is
// WaitProviderMessage). It returns 0 and "" when there is none.
func ErrorWait(err error) (d time.Duration, why string) {
	if err == nil {
		return 0, ""
	}
	return errorWait(err, textN(err, maxHintText))
}

// errorWait is ErrorWait with err's text already read. A panic in one of
// err's methods gives no wait.
func errorWait(err error, text string) (d time.Duration, why string) {
	defer func() {
		if recover() != nil {
			d, why = 0, ""
		}
	}()
	raw, hd, hwhy := "", time.Duration(0), ""
	Walk(err, func(e error) bool {
		if x, ok := e.(interface{ RetryAfter() time.Duration }); ok {
			if v := x.RetryAfter(); v > 0 && v <= maxHint {
				d = v
				return false
			}
		}
		if raw == "" {
			raw = rawJSONOf(e)
		}
		if hd == 0 {
			if r := responseOf(e); r != nil {
				hd, hwhy = HeaderWait(r.Header, r.StatusCode, time.Now())
			}
		}
		return true
	})
	if d > 0 {
		return d, WaitErrorMethod
	}
	if hd > 0 {
		return hd, WaitHeader + " " + hwhy
	}
	if p, ok := parseProviderJSON(raw); ok {
		if d = TextWait(p.Message); d > 0 {
			return d, WaitProviderMessage
		}
	}
	if d = TextWait(text); d > 0 {
		return d, WaitProviderMessage
	}
	return 0, ""
}

// responseType is the type of the field responseOf reads.
var responseType = reflect.TypeFor[*http.Response]()

// responseOf returns the failed response e keeps in a field Response
// *http.Response (a pointer to a struct: the Stainless SDKs' *Error), or
// nil.
func responseOf(e error) *http.Response {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Response")
	if !f.IsValid() || f.Type() != responseType || f.IsNil() || !f.CanInterface() {
		return nil
	}
	return f.Interface().(*http.Response)
}
