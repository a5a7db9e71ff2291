package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// sdk429 has the shape of openai-go's and anthropic-sdk-go's *Error: the
// failed response in a field.
type sdk429 struct{ Response *http.Response }

func (e *sdk429) Error() string   { return "POST \"/v1/chat/completions\": 429 Too Many Requests" }
func (e *sdk429) StatusCode() int { return 429 }

func rateLimited(after string) error {
	h := http.Header{}
	h.Set("Retry-After", after)
	return &sdk429{&http.Response{StatusCode: 429, Header: h}}
}

// Issue 27: out of the box, a transient failure is retried twice with
// backoff, as the SDK would have before the integrations turned its own
// retries off, and the server's Retry-After is honoured. Before, the
// default config made one attempt: the 429 ended the call.
func TestTransientFloorOutOfTheBox(t *testing.T) {
	cases := []struct {
		name     string
		errs     []error
		policy   si.RetryPolicy
		cfg      si.Config
		attempts int
		ok       bool
		minWait  time.Duration
	}{
		{"429 twice, with retry-after", []error{rateLimited("2"), rateLimited("2")}, si.RetryPolicy{}, si.Config{}, 3, true, 4 * time.Second},
		{"503 twice, backoff", []error{err503, err503}, si.RetryPolicy{}, si.Config{}, 3, true, 750 * time.Millisecond},
		{"503 three times", []error{err503, err503, err503}, si.RetryPolicy{}, si.Config{}, 3, false, 750 * time.Millisecond},
		{"the config allows more", []error{err503, err503, err503}, si.RetryPolicy{}, si.Config{MaxAttempts: 4}, 4, true, 0},
		{"a stall before the first token, backoff", []error{failure.ErrFirstTokenTimeout, failure.ErrFirstTokenTimeout}, si.RetryPolicy{}, si.Config{}, 3, true, 750 * time.Millisecond},
		{"400 is not retried", []error{errors.New("400 Bad Request: invalid parameter")}, si.RetryPolicy{}, si.Config{}, 1, false, 0},
		{"other is not the SDK's to retry", []error{errors.New("tool exploded")}, si.RetryPolicy{}, si.Config{}, 1, false, 0},
		{"floor off", []error{err503}, si.RetryPolicy{TransientAttempts: 1}, si.Config{}, 1, false, 0},
		{"floor of 5", []error{err429, err429, err429, err429}, si.RetryPolicy{TransientAttempts: 5}, si.Config{}, 5, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := fakeclock.New(t0)
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithClock(clk),
				si.WithRetryPolicy(c.policy), si.WithDefaultConfig(c.cfg), si.WithStrategy(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			n := 0
			var at []time.Time
			rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
				at = append(at, clk.Now())
				if n++; n <= len(c.errs) {
					return c.errs[n-1]
				}
				return nil
			})
			if rep.Attempts != c.attempts || rep.Success != c.ok {
				t.Fatalf("%d attempts, success %v; want %d, %v", rep.Attempts, rep.Success, c.attempts, c.ok)
			}
			if w := at[len(at)-1].Sub(at[0]); w < c.minWait {
				t.Fatalf("the retries came %v after the first attempt, want at least %v (%v)", w, c.minWait, fmt.Sprint(at))
			}
		})
	}
	if _, err := si.New(si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 11})); !errors.Is(err, si.ErrInvalidOption) {
		t.Fatalf("TransientAttempts 11: %v", err)
	}
}
