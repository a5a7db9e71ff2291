package selfimprove

import (
	"net/http"
	"testing"
	"time"
)

// FuzzRetryAfter: the wait parsers never panic, never return a negative
// wait, and never one beyond what a header or message can ask.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"2", "1.5", "Wed, 21 Oct 2026 07:28:00 GMT", "6m0s", "1s", "2026-11-23T10:00:00Z",
		"Please try again in 1.5s", "try again in 20ms", "-5", "9999999999999999999", "1e308", "NaN"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range []string{"retry-after", "retry-after-ms", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
			"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset"} {
			h := http.Header{}
			h.Set(name, s)
			if d, _ := HeaderWait(h, http.StatusTooManyRequests, now); d < 0 {
				t.Fatalf("%s: %q → %v", name, s, d)
			}
		}
		if d := TextWait(s); d < 0 {
			t.Fatalf("text %q → %v", s, d)
		}
	})
}

// FuzzProviderError: the provider error body parser never panics, and
// classifies any body to a known class or none.
func FuzzProviderError(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"The model does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"error":{"code":"insufficient_quota"}}`, `{"error":"x"}`, `[]`, `{"error":{"message":{"a":1}}}`, ``,
	} {
		f.Add(s, 429)
	}
	f.Fuzz(func(t *testing.T, raw string, status int) {
		parseProviderJSON(raw)
		providerClass(raw, raw, status)
	})
}
