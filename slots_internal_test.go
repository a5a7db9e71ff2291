package selfimprove

import (
	"context"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestSlotBlocks: every call carries a score slot, and the slots come
// slotsPerBlock to an allocation: a call that scores itself and reports
// its cost, and one that does neither, make one allocation in
// slotsPerBlock calls; no slot is given twice.
func TestSlotBlocks(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under the race detector")
	}
	clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	seen := make(map[context.Context]bool)
	scored := func(ctx context.Context, _ Config) error {
		AddCost(ctx, 1)
		return l.AddScore(ctx, 0.75)
	}
	plain := func(ctx context.Context, _ Config) error {
		if seen != nil {
			if seen[ctx] {
				t.Error("a slot given twice")
			}
			seen[ctx] = true
		}
		return nil
	}
	for range 3 * slotsPerBlock {
		l.ExecuteWithImprovement(ctx, "a", plain)
	}
	seen = nil
	const blocks = 64
	for _, fn := range []func(context.Context, Config) error{scored, plain} {
		// A collection may drop a block the pool holds: a few more.
		if n := testing.AllocsPerRun(1, func() {
			for range blocks * slotsPerBlock {
				_, _ = l.ExecuteWithImprovement(ctx, "a", fn)
			}
		}); n > blocks+4 {
			t.Errorf("%d calls allocate %v times, want one block of slots in %d calls", blocks*slotsPerBlock, n, slotsPerBlock)
		}
	}
	if v, _ := l.View("a"); v.Versions[1].Scored != 2*blocks*slotsPerBlock || v.Versions[1].Costed != 2*blocks*slotsPerBlock {
		t.Errorf("figures %+v", v.Versions[1])
	}
}
