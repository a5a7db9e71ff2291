package selfimprove_test

import (
	"context"
	"errors"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// TestContextLengthRetriesWithinMaxAttempts: a request too long for the
// model moves down a route ladder whatever MaxAttempts says, but on the
// same model it is retried only as the attempts allow. Before, a
// RetryPolicy.Permanent that left context_length out (the documented
// empty list, "retries every class", or a list of one's own) made such a
// call retry at once and without end: fn ran 1,000 times, when the test's
// fn gave up failing.
func TestContextLengthRetriesWithinMaxAttempts(t *testing.T) {
	for _, tc := range []struct {
		name string
		perm []failure.Class
		cfg  si.Config
		rp   si.RetryPolicy
	}{
		{"default config, Permanent: auth, quota", []failure.Class{failure.ClassAuth, failure.ClassQuota}, si.Config{}, si.RetryPolicy{}},
		{"MaxAttempts 2, empty Permanent (retry every class)", []failure.Class{}, si.Config{MaxAttempts: 2}, si.RetryPolicy{TransientAttempts: 1}},
		{"default policy: context_length is permanent", nil, si.Config{MaxAttempts: 3}, si.RetryPolicy{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, si.WithRetryPolicy(si.RetryPolicy{Permanent: tc.perm, TransientAttempts: tc.rp.TransientAttempts}),
				si.WithDefaultConfig(tc.cfg))
			tooLong := errors.New("400 This model's maximum context length is 8192 tokens (context_length_exceeded)")
			if c := failure.Classify(tooLong); c != failure.ClassContextLength {
				t.Fatalf("class %s", c)
			}
			n := 0
			rep, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
				n++
				if n >= 1000 {
					return nil // the runaway's end
				}
				return tooLong
			})
			want := max(tc.cfg.MaxAttempts, 1)
			if tc.perm == nil {
				want = 1 // permanent: never again to the same model
			}
			if n != want || !errors.Is(err, tooLong) {
				t.Errorf("MaxAttempts %d: fn ran %d times (attempts %d), want %d; error %v", tc.cfg.MaxAttempts, n, rep.Attempts, want, err)
			}
		})
	}
}
