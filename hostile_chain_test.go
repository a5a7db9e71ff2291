package selfimprove

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"
)

// Errors whose chains never end or are huge (internal/hostileerr): the
// dispatcher's delivery rule and a call walk a bounded part of them.

func TestRedeliverHostileChains(t *testing.T) {
	for _, tt := range hostileerr.Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			var (
				retry bool
				after time.Duration
			)
			promptly(t, "redeliver", func() { retry, after = redeliver(tt.Err), retryAfter(tt.Err) })
			wantAfter := time.Duration(0)
			if _, ok := tt.Err.(*hostileerr.RingErr); ok {
				wantAfter = 7 * time.Second
			}
			if retry || after != wantAfter {
				t.Errorf("redeliver = %v, retryAfter = %v; want false, %v", retry, after, wantAfter)
			}
		})
	}
}

// A call whose fn fails with such an error returns it, at once.
func TestCallWithHostileChains(t *testing.T) {
	// The ring errors ask for a 7s wait (RetryAfter), which the retry
	// honours: on a simulated clock that waits without sleeping.
	l, err := New(WithStore(NewRAMStore()), WithNotifier(nil), WithStrategy(nil), WithClock(fakeclock.New(time.Unix(0, 0))),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithRetryPolicy(RetryPolicy{TransientAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Two attempts: the failure is classified for the retry as well.
	if err := l.SetConfig("a", Config{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range hostileerr.Cases() {
		if _, ok := tt.Err.(interface{ Unwrap() error }); !ok {
			continue // lists: not comparable, checked by Classify alone
		}
		if _, ok := tt.Err.(hostileerr.Holder); ok {
			continue
		}
		t.Run(tt.Name, func(t *testing.T) {
			var (
				rep Report
				got error
			)
			promptly(t, "ExecuteWithImprovement", func() {
				rep, got = l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error { return tt.Err })
			})
			if got != tt.Err || rep.Attempts != 2 {
				t.Errorf("returned %v after %d attempts, want fn's error after 2", got, rep.Attempts)
			}
		})
	}
}
