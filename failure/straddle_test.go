package failure_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
)

// TestTextScrubsAcrossTheCut: a secret that straddles the point where the
// text is cut is redacted whole (issue 29, item 7: 1,000 hex digits, a
// space and a 40-character token kept 23 characters of the token).
func TestTextScrubsAcrossTheCut(t *testing.T) {
	const tok = "Zq9XbT4kLm2NpR7sVw1YcD8fGh3JkQ6tUe5WiO0a" // 40 characters, mixed case and digits
	for _, pad := range []int{990, 995, 1000, 1010, 1020, 1023} {
		for _, secret := range []string{tok, "sk-live-" + tok, "Bearer " + tok, "password=" + tok} {
			msg := strings.Repeat("f", pad) + " " + secret + " tail"
			got := failure.Text(errors.New(msg))
			for n := 8; n <= len(tok); n++ {
				if strings.Contains(got, tok[:n]) {
					t.Fatalf("pad %d, %q: Text keeps %q of the secret: %q", pad, secret[:10], tok[:n], got)
				}
			}
		}
	}
}
