package price_test

import (
	"math"
	"testing"

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
