package price_test

import (
	"context"
	"math"
	"testing"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/price"
)

// TestTable: a model's price is its own, else its undated name's; the
// cached input has its price; an unknown model has none.
func TestTable(t *testing.T) {
	p := price.Table{"gpt-4o": {Input: 2.5, Output: 10, CachedInput: 1.25}, "gpt-4o-mini": {Input: 0.15, Output: 0.6},
		"claude-3-5-haiku": {Input: 0.8, Output: 4}}
	for _, tt := range []struct {
		model string
		u     price.Usage
		want  float64
		ok    bool
	}{
		{"gpt-4o", price.Usage{Input: 1000, CachedInput: 400, Output: 100}, (600*2.5 + 400*1.25 + 100*10) / 1e6, true},
		{"gpt-4o-2024-08-06", price.Usage{Input: 1000, Output: 100}, (1000*2.5 + 100*10) / 1e6, true},
		{"gpt-4o-mini-2024-07-18", price.Usage{Input: 1000, CachedInput: 1000, Output: 100}, (1000*0.15 + 100*0.6) / 1e6, true},
		{"claude-3-5-haiku-20241022", price.Usage{Input: 10, Output: 20}, (10*0.8 + 20*4) / 1e6, true},
		{"gpt-4o-audio", price.Usage{Input: 1}, 0, false},
		{"gpt-4o-2024-08-0x", price.Usage{Input: 1}, 0, false},
		{"gpt-4", price.Usage{Input: 1}, 0, false},
	} {
		got, ok := p.Cost(tt.model, tt.u)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-15 {
			t.Errorf("Cost(%q, %+v) = %g, %v; want %g, %v", tt.model, tt.u, got, ok, tt.want, tt.ok)
		}
	}
}

// TestTally: a tally reports nothing until a usage was set; an update
// that reports none (a stream's delta without its start) changes the
// counts but reports nothing by itself; the last usage set is reported,
// priced, once per Report.
func TestTally(t *testing.T) {
	p := price.Table{"m": {Input: 1e6, Output: 2e6}}
	var tl price.Tally
	if c, ok := booked(&tl, p); ok {
		t.Fatalf("empty tally booked %v", c)
	}
	tl.Update(func(_ *string, u *price.Usage) bool { u.Output = 5; return false })
	if c, ok := booked(&tl, p); ok {
		t.Fatalf("a delta alone booked %v", c)
	}
	tl.Set("m", price.Usage{Input: 1, Output: 1})
	tl.Update(func(_ *string, u *price.Usage) bool { u.Output = 3; return false })
	if c, ok := booked(&tl, p); !ok || c != 1+3*2 {
		t.Fatalf("booked %v, %v: want 7", c, ok)
	}
}

// booked runs tl.Report in a call of a fresh Loop and returns the cost
// the call booked.
func booked(tl *price.Tally, p price.Table) (float64, bool) {
	l, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithStrategy(nil), selfimprove.WithNotifier(nil))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ selfimprove.Config) error {
		tl.Report(ctx, p)
		return nil
	})
	return rep.Cost, rep.Cost != 0
}
