package looptest

import (
	"context"
	"errors"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// NextStepLoop opens a Loop in RAM on a fake clock (from 2026-03-01
// 12:00 UTC), with the route ladder primary → backup and one attempt a
// call, and makes two agents whose next steps the operator surfaces show
// (issue 26, item 4):
//   - "away": its primary overloaded for an hour, moved to backup, with
//     a probe of the primary scheduled;
//   - "cooling": its primary withdrawn (dead from its first 404, so that
//     the agent's next call goes to backup, which it moves to), then a
//     bad request the strategy files for a person, cooling down.
func NextStepLoop(t *testing.T) (*si.Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(Quiet),
		si.WithFlushInterval(0), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	calls := func(agent string, n int, up func(route string) error) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
				clk.Advance(100 * time.Millisecond)
				return up(cfg.Route)
			})
			clk.Advance(10 * time.Second)
		}
	}
	start := clk.Now()
	onPrimary := func(r string) bool { return r == "" || r == "primary" }
	calls("away", 40, func(r string) error {
		if onPrimary(r) && clk.Now().Before(start.Add(time.Hour)) {
			return errors.New("upstream 503: service unavailable")
		}
		return nil
	})
	calls("cooling", 3, func(r string) error {
		if onPrimary(r) {
			return errors.New("404 model_not_found: the model `primary` does not exist")
		}
		return nil
	})
	calls("cooling", 30, func(string) error { return errors.New("400 invalid_request_error: messages: unknown field") })
	return l, clk
}
