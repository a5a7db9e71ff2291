package selfimprove

import (
	"context"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// A cooldown that is over leaves the lock-free path to the agent's
// calls: the first call after it clears flagCool, whatever path books
// it. (Found in review: the flag stayed set after a success booked
// without the lock, and every later call took the agent's lock to read
// a cooldown long past.)
func TestCoolFlagClearedWhenOver(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil),
		WithDefaultConfig(Config{MaxAttempts: 3}), WithRoutes(Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	silent := true
	fn := func(ctx context.Context, c Config) error {
		if c.Route != "backup" && silent {
			return context.DeadlineExceeded // no answer in time: its client's timeout
		}
		return nil
	}
	l.ExecuteWithImprovement(context.Background(), "a", fn)
	v, _ := l.agents.Load("a")
	a := v.(*agent)
	if !a.has(flagCool) {
		t.Fatal("no cooldown after a call its route left without an answer")
	}
	silent = false
	clk.Advance(6 * time.Second)
	for range 3 {
		l.ExecuteWithImprovement(context.Background(), "a", fn)
	}
	if a.has(flagCool) {
		t.Error("flagCool still set once the cooldown is over")
	}
}
