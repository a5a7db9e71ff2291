package failure_test

import (
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
)

// BenchmarkScrub: scrubbing a typical 200-byte error with nothing to
// remove (the common case: 0 allocations), a clean text full of paths and
// URLs, and a text with secrets (one allocation: the result).
func BenchmarkScrub(b *testing.B) {
	for _, c := range []struct{ name, msg string }{
		{"typical", `error code: 429 - {'error': {'message': 'Rate limit reached for gpt-4o in org-7f3a9c on tokens per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s.', 'code': 'rate_limit'}}`},
		{"paths", `Post "https://api.example.com:8443/v1/chat/completions": open /root/.aws/credentials: no such file; GET /home/Bob/Projects/app2/data/Cache9/wxyz redis://cache:6379/0`},
		{"secrets", `dial redis://user:pa/ss@host:6379/0: signature mismatch for /K7MDENG/bPxRfiCYEXAMPLEKEYwJalrXUtnFEMI, jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = failure.Scrub(c.msg)
			}
		})
	}
}
