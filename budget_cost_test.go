package selfimprove_test

import (
	"context"
	"math"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// A NaN or negative cost is not booked, by the Budget either: its cap
// still holds. Before, a NaN (a price table's 0/0) made Spent NaN and
// switched the cap off for good, and a negative cost refunded it.
func TestBudgetIgnoresCostsNotBooked(t *testing.T) {
	for _, bad := range []float64{math.NaN(), -100} {
		e := newEnv(t)
		b := &si.Budget{Cost: 10}
		ctx := si.WithBudget(context.Background(), b)
		runs := 0
		for i := range 5 {
			e.l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, _ si.Config) error {
				runs++
				e.clk.Advance(time.Millisecond)
				if i == 0 {
					si.AddCost(ctx, bad)
				}
				si.AddCost(ctx, 6)
				return nil
			})
		}
		if spent, _ := b.Spent(); runs > 2 || spent != 12 {
			t.Errorf("cost %v: a Budget of cost 10 ran %d calls of cost 6, spent %v; want 2 calls, 12", bad, runs, spent)
		}
	}
}
