package selfimprove_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// summaries counts the daily summaries a notifier gets.
type summaries struct {
	mu sync.Mutex
	n  int
}

func (r *summaries) Notify(_ context.Context, e si.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Type == si.EventDailySummary {
		r.n++
	}
	return nil
}

// The daily summary goes once at its time of day, with a Clock that lags
// the runtime's timers (as WithCoarseClock's readings may, by up to its
// resolution, or a simulated clock). Before, the next one was found the
// same time of day again, a little ahead of the lagging reading: 6
// summaries in 2 s.
func TestDailySummaryOnceWithALaggingClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := fakeclock.New(time.Date(2026, 3, 1, 8, 59, 59, 700_000_000, time.UTC)) // stands still
		r := &summaries{}
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithLogger(quiet),
			si.WithNotifier(r), si.WithNotifyOptions(si.NotifyOptions{BurstLimit: -1}), si.WithDailySummary(9*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		l.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.n != 1 {
			t.Fatalf("%d daily summaries within 2 s of 09:00, want 1", r.n)
		}
	})
}
