package admin_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestOverviewOffsetPastTheEnd: an offset past the last agent, however
// large, is an empty page with the total, as a page past the end of any
// list. Before, an offset near the largest int made offset+limit
// overflow and the handler panicked (the slice's bounds).
func TestOverviewOffsetPastTheEnd(t *testing.T) {
	l, clk := newLoop(t)
	traffic(t, l, clk, "a", 3, 0)
	h := admin.Handler(l, admin.Options{SampleEvery: -1})
	for _, q := range []string{
		"offset=1",
		"offset=2&limit=200",
		"offset=9223372036854775800",
		fmt.Sprintf("offset=%d&limit=1", math.MaxInt64),
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("GET /api/overview?%s panics: %v", q, p)
				}
			}()
			if got := overviewOf(t, h, q); got.Total != 1 || len(got.Agents) != 0 {
				t.Errorf("GET /api/overview?%s: total %d, %d agents; want 1 and an empty page", q, got.Total, len(got.Agents))
			}
		}()
	}
}
