package selfimprove_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// Issue 41, item 1: a cheaper candidate is adopted only when its quality
// is shown no worse than the config's by more than 0.05, never on cost
// alone when the agent scores. 10 % of the calls are scored (σ 0.15),
// every call is costed; the config in force costs 1 a call at quality
// 0.85, the candidate 0.5 at quality q. Before: exploration began once
// the config had 100 calls with a cost (about 10 scores, too few for a
// quality reference), and the candidate was confirmed for its saving at
// its 20th call with a cost whatever its quality: 0.40 was adopted in 20
// of 20 trials.
func TestCheaperCandidateNeedsItsQuality(t *testing.T) {
	for _, tc := range []struct {
		quality float64
		most    float64 // the most share of trials that may adopt it
		least   float64 // the least
	}{
		{0.40, 0, 0},
		{0.75, 0.05, 0},
		{0.85, 1, 0.8},
	} {
		t.Run(fmt.Sprintf("quality %.2f", tc.quality), func(t *testing.T) {
			trials := int(seeds(20))
			adopted := 0
			for seed := range uint64(trials) {
				w := newCandWorld(t, 0.1, seed+1, si.WithExploration(si.Exploration{Share: 0.1}),
					si.WithCandidates(si.Candidate{Name: "cheap", Route: "small"}))
				w.sd = 0.15
				w.cost = func(c si.Config) float64 { return map[string]float64{"": 1, "small": 0.5}[c.Route] }
				w.quality = func(c si.Config) float64 { return map[string]float64{"": 0.85, "small": tc.quality}[c.Route] }
				for i := 1; i <= 12_000; i++ {
					rep := w.call()
					if c := rep.Confirmed; c != nil && c.To.Route == "small" {
						if tc.quality < 0.85 && !strings.Contains(c.Verdict, "within") {
							t.Errorf("seed %d: confirmed without its quality: %s", seed, c.Verdict)
						}
						adopted++
						break
					}
				}
			}
			share := float64(adopted) / float64(trials)
			if share > tc.most || share < tc.least {
				t.Errorf("a candidate at half the cost and quality %.2f (against 0.85) adopted in %d of %d trials; want a share in [%.2f, %.2f]",
					tc.quality, adopted, trials, tc.least, tc.most)
			}
			t.Logf("quality %.2f at half the cost: adopted in %d of %d trials (%.0f %%, 95 %% interval up to %.0f %%)", tc.quality, adopted, trials,
				100*share, 100*upper95(adopted, trials))
		})
	}
}

// upper95 is the upper end of the 95 % Wilson interval of k in n.
func upper95(k, n int) float64 {
	const z = 1.96
	p, fn := float64(k)/float64(n), float64(n)
	c := (p + z*z/(2*fn) + z*math.Sqrt(p*(1-p)/fn+z*z/(4*fn*fn))) / (1 + z*z/fn)
	return min(c, 1)
}
