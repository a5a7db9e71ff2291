package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// waitingLimit is a provider's 429 that asks for a wait.
type waitingLimit struct{ wait time.Duration }

func (e waitingLimit) Error() string {
	return "429 Rate limit reached for gpt-4.1 on requests per min (RPM)"
}
func (e waitingLimit) StatusCode() int           { return 429 }
func (e waitingLimit) RetryAfter() time.Duration { return e.wait }

// TestRateLimitedPrimaryUnderADeadlineFallsBack: the primary answers 429
// asking for 30 s, under a caller deadline of 5 s; the fallback answers
// at once. The wait would pass the deadline, so the primary's attempts
// are over, and the call goes to the fallback at once. Before, it
// returned the 429 after one attempt: the fallback, which would have
// answered, was never asked (with the default config and with
// MaxAttempts 3).
func TestRateLimitedPrimaryUnderADeadlineFallsBack(t *testing.T) {
	for _, attempts := range []int{0, 3} {
		e := newEnv(t, si.WithRoutes(si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}),
			si.WithDefaultConfig(si.Config{MaxAttempts: attempts}), si.WithRetryPolicy(si.RetryPolicy{})) // the transient floor: 3 attempts
		var asked []string
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rep, err := e.l.ExecuteWithImprovement(ctx, "a", func(_ context.Context, cfg si.Config) error {
			asked = append(asked, cfg.Route)
			if cfg.Route == "" || cfg.Route == "gpt-4.1" {
				return waitingLimit{30 * time.Second}
			}
			return nil
		})
		cancel()
		if err != nil || len(asked) != 2 || asked[1] != "gpt-4o" {
			t.Errorf("MaxAttempts %d: error %v after %d attempts on %q; want the fallback asked at once", attempts, err, rep.Attempts, asked)
		}
	}
}

// TestLastStatusFromTheError: Attempt.LastStatus is the previous
// attempt's HTTP status, from the transport's record or, without one,
// from the error (its StatusCode method). Before, an error's own status
// was left out: a retry after a 429 said "after a 0".
func TestLastStatusFromTheError(t *testing.T) {
	e := newEnv(t, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	n, last := 0, -1
	e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		if a, ok := si.AttemptInfo(ctx); ok {
			last = a.LastStatus
		}
		if n++; n == 1 {
			return waitingLimit{time.Millisecond}
		}
		return nil
	})
	if last != 429 {
		t.Errorf("the second attempt's LastStatus is %d, want 429", last)
	}
}
