package failure

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// FuzzClassifySignature: Classify never panics and always names a class;
// Signature is idempotent, valid UTF-8, at most 120 runes, and has no
// secret Scrub would remove; Scrub is idempotent.
func FuzzClassifySignature(f *testing.F) {
	for _, s := range []string{
		"", "timeout after 30s on req 123", "HTTP/1.1 429 Too Many Requests", "RateLimitError",
		"request 14290 failed", `model "gpt-4" not found`, "open /var/x.log: no such file",
		"key sk-abcdefghijklmnop1234 rejected", "password=hunter2&x=1", "https://u:p@h/x",
		"550e8400-e29b-41d4-a716-446655440000", "Ошибка 500", "\xff\xfe", "'a 'b'", "\"unterminated",
		strings.Repeat("é", 130), "0xdeadbeef1", "1.2.3,4", "Bearer abc.def/ghi~jkl", `C:\x\y`,
		"aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.", "redis://:p@ss@h:1/x", "/x?key=abc&Sig=y",
		"password = x", "m=AbCdEf0123456789AbCdEf0123456789xx", "/a/.aws/credentials: no",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c := Classify(errors.New(s)); c == "" {
			t.Fatalf("Classify(%q) is empty", s)
		}
		sig := Signature(s)
		if !utf8.ValidString(sig) || utf8.RuneCountInString(sig) > MaxSignature {
			t.Fatalf("Signature(%q) = %q: invalid or too long", s, sig)
		}
		if again := Signature(sig); again != sig {
			t.Fatalf("Signature not idempotent: %q → %q → %q", s, sig, again)
		}
		sc := Scrub(s)
		if again := Scrub(sc); again != sc {
			t.Fatalf("Scrub not idempotent: %q → %q → %q", s, sc, again)
		}
		if got := Scrub(sig); got != sig {
			t.Fatalf("a signature holds what Scrub removes: %q → %q", sig, got)
		}
	})
}
