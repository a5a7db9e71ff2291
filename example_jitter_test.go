package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// simClock is a simulated clock: Sleep, the optional method of a
// selfimprove.Clock, moves it on at once instead of waiting. The loop
// reads it from its own goroutines too: it is safe for concurrent use.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// RetryPolicy.JitterSeed makes the retry backoff's jitter a fixed
// sequence: on a simulated clock, the same calls take the same time on
// every run.
func ExampleRetryPolicy_jitterSeed() {
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil), selfimprove.WithClock(clk),
		selfimprove.WithRetryPolicy(selfimprove.RetryPolicy{JitterSeed: 42}),
		selfimprove.WithDefaultConfig(selfimprove.Config{MaxAttempts: 3, Backoff: 100 * time.Millisecond}))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	tries := 0
	rep, err := l.ExecuteWithImprovement(context.Background(), "search", func(context.Context, selfimprove.Config) error {
		if tries++; tries < 3 {
			return errors.New("upstream 503")
		}
		return nil
	})
	fmt.Println(rep.Attempts, rep.Duration, err)
	// Output: 3 194.761895ms <nil>
}
