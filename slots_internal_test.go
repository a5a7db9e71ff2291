package selfimprove

import (
	"context"
	"errors"
	"runtime"
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
	l, _ := quietRAMLoop(t)
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

// TestCallScoresOff: WithCallScores(false) gives calls no slot, chosen
// at New: a successful call allocates no byte (one with slots, 33 bytes
// of its block), AddScore in fn returns ErrUnknownCall, and a cost adds
// to the call's Budget only; a score by ID is booked.
func TestCallScoresOff(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under the race detector")
	}
	perCall := func(l *Loop, fn func(context.Context, Config) error) float64 {
		const n = 31 * 100
		l.ExecuteWithImprovement(context.Background(), "a", fn)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			l.ExecuteWithImprovement(context.Background(), "a", fn)
		}
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / n
	}
	plain := func(context.Context, Config) error { return nil }
	for _, on := range []bool{true, false} {
		clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
		l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(nil), WithCallScores(on))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if b := perCall(l, plain); on && b < 30 || !on && b >= 1 {
			t.Errorf("call scores %v: %.1f bytes a call", on, b)
		}
		if on {
			continue
		}
		bud := &Budget{}
		rep, _ := l.ExecuteWithImprovement(WithBudget(context.Background(), bud), "a", func(ctx context.Context, _ Config) error {
			AddCost(ctx, 2)
			if err := l.AddScore(ctx, 0.5); !errors.Is(err, ErrUnknownCall) {
				t.Errorf("AddScore without call scores: %v", err)
			}
			return nil
		})
		if err := l.Score("a", rep.ID, 0.25); err != nil {
			t.Fatal(err)
		}
		if spent, _ := bud.Spent(); spent != 2 || rep.Cost != 0 {
			t.Errorf("budget spent %v, Report.Cost %v", spent, rep.Cost)
		}
		if v, _ := l.View("a"); v.Versions[1].Scored != 1 || v.Versions[1].Quality != 0.25 || v.Versions[1].Costed != 0 {
			t.Errorf("figures %+v", v.Versions[1])
		}
	}
}
