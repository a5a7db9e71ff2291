package selfimprove_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// qualityWorld runs the calls of agent "bot", one every 10 seconds, each
// scored with probability share, with scores of mean quality(route) and
// σ 0.25 by the route the call runs.
type qualityWorld struct {
	e       *env
	r       *rand.Rand
	share   float64
	quality map[string]float64
}

func newQualityWorld(t *testing.T, share float64, seed uint64) *qualityWorld {
	e := newEnv(t, si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"fallback"}}))
	scoringOn(t, e.l)
	return &qualityWorld{e: e, r: rand.New(rand.NewPCG(seed, 30)), share: share,
		quality: map[string]float64{"primary": 0.85, "fallback": 0.80}}
}

func (w *qualityWorld) call() si.Report {
	w.e.clk.Advance(10 * time.Second)
	rep, err := w.e.l.ExecuteWithImprovement(context.Background(), "bot", func(ctx context.Context, cfg si.Config) error {
		w.e.clk.Advance(100 * time.Millisecond)
		route := cfg.Route
		if route == "" {
			route = "primary"
		}
		if w.r.Float64() < w.share {
			return w.e.l.AddScore(ctx, scoresim.Beta(w.r, w.quality[route], 0.25))
		}
		return nil
	})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return rep
}

// TestQualityDropMovesDownTheLadder: a silent regression of the primary
// (mean 0.85 → 0.60, σ 0.25) with a fallback at 0.80: the agent moves to
// the fallback and confirms the move within 300 calls when every call is
// scored, within 1,500 when 10 % are, and stays there.
func TestQualityDropMovesDownTheLadder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		share  float64
		warmup int
		within int
	}{
		{"every call scored", 1, 500, 300},
		{"10% scored", 0.1, 2000, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := uint64(20)
			if n, err := strconv.ParseUint(os.Getenv("QUALITY_SEEDS"), 10, 32); err == nil {
				seeds = n // for the figures of docs/quality.md
			}
			var at []int
			for seed := range seeds {
				w := newQualityWorld(t, tc.share, seed+1)
				for i := range tc.warmup {
					if rep := w.call(); rep.Improvement != nil || rep.ImprovementTriggered {
						t.Fatalf("seed %d: healthy call %d triggered a change: %+v", seed, i, rep.Improvement)
					}
				}
				w.quality["primary"] = 0.60 // the provider's silent model update
				confirmed := 0
				for i := 1; i <= 3*tc.within && confirmed == 0; i++ {
					rep := w.call()
					if rep.Rollback != nil {
						t.Fatalf("seed %d: call %d rolled back %v: %s", seed, i, rep.Rollback.To.Route, rep.Rollback.Verdict)
					}
					if c := rep.Confirmed; c != nil {
						if c.To.Route != "fallback" || !strings.Contains(c.Reason, "mean quality fell") || !strings.Contains(c.Verdict, "mean quality") {
							t.Fatalf("seed %d: confirmed %+v", seed, c)
						}
						confirmed = i
					}
				}
				at = append(at, confirmed)
				if confirmed == 0 || confirmed > tc.within {
					t.Errorf("seed %d: the move confirmed at call %d after the fall, want within %d", seed, confirmed, tc.within)
				}
				for range 1000 {
					w.call()
				}
				if got := w.e.l.Config("bot").Route; got != "fallback" {
					t.Errorf("seed %d: route %q 1,000 calls after the move, want it to stay on the fallback", seed, got)
				}
			}
			slices.Sort(at)
			t.Logf("the move confirmed at call (after the fall) median %d, 90th percentile %d, max %d, in %d trials",
				at[len(at)/2], at[len(at)*9/10], at[len(at)-1], len(at))
		})
	}
}

// TestQualityNoiseTriggersNothing: a healthy agent whose every call is
// scored with noisy scores (mean 0.85, σ 0.25) triggers at most 1 change
// per 1,000 calls.
func TestQualityNoiseTriggersNothing(t *testing.T) {
	const calls = 10_000
	triggered := 0
	for seed := range uint64(3) {
		w := newQualityWorld(t, 1, 100+seed)
		for range calls {
			if rep := w.call(); rep.ImprovementTriggered {
				triggered++
			}
		}
	}
	if triggered > 3*calls/1000 {
		t.Errorf("%d analyses in %d healthy calls, want at most 1 per 1,000", triggered, 3*calls)
	}
	t.Logf("%d analyses in %d healthy calls", triggered, 3*calls)
}
