package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// The decision suite (issue 41, item 1: one decision over every signal).
// It runs
//
//	go test ./benchmarks -run TestDecideSuite -v
//	DECIDE_SCALE=25 go test ./benchmarks -run TestDecideSuite -v -timeout 30m
//
// The loop rows drive a real Loop through its public API on a fake
// clock (a call every 10 seconds that lasts 100 ms, the built-in
// strategy, the default policy, a RAM store), decideLoopN trials each
// (times DECIDE_SCALE): a cheaper candidate explored at 10 % judging,
// and a pricier model repairing a fall of quality. The verification rows
// ask RollbackPolicy.Decide after every call, as the loop asks it,
// decideVerifyN changes each (times DECIDE_SCALE): a change that lowers
// quality by 0.10, and a harmless one, at 10 % judging. Every figure is
// seeded (one seed a trial): the same run prints the same table.

const (
	decideLoopN   = 30
	decideVerifyN = 150
)

// decideScale is DECIDE_SCALE, 1 when unset; a tenth of the verification
// rows under -short or the race detector.
func decideScale() (loop, verify int) {
	s, err := strconv.Atoi(os.Getenv("DECIDE_SCALE"))
	if err != nil || s < 1 {
		s = 1
	}
	loop, verify = decideLoopN*s, decideVerifyN*s
	if raceEnabled || testing.Short() {
		loop, verify = loop/4, verify/10
	}
	return loop, verify
}

// share words k of n with its 95 % interval.
func share(k, n int) string {
	lo, hi := scoresim.Wilson95(k, n)
	return fmt.Sprintf("%d of %d (%.1f %%; 95 %% interval %.1f–%.1f %%)", k, n, 100*float64(k)/float64(n), 100*lo, 100*hi)
}

// trials runs trial(seed) for seeds 1..n on every CPU and returns how
// many returned true, and the reasons of the first few that did not
// (for the log).
func trials(n int, trial func(seed uint64) (bool, string)) (k int, notes []string) {
	out := make([]bool, n)
	why := make([]string, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], why[i] = trial(uint64(i + 1))
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, ok := range out {
		if ok {
			k++
		} else if len(notes) < 3 && why[i] != "" {
			notes = append(notes, why[i])
		}
	}
	return k, notes
}

// decideWorld is one agent "bot" on a real Loop: quality(cfg) is the
// mean of its scores (σ sd), cost(cfg) its cost a call, slow(cfg) what
// its calls last beyond 100 ms; share of the calls are scored.
type decideWorld struct {
	l       *si.Loop
	clk     *fakeclock.Clock
	r       *rand.Rand
	share   float64
	sd      float64
	quality func(si.Config) float64
	cost    func(si.Config) float64
	slow    func(si.Config) time.Duration
}

func newDecideWorld(seed uint64, share float64, opts ...si.Option) *decideWorld {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(discard), si.WithClock(clk),
		si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{})}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		panic(err) // trials run on other goroutines: no t.Fatal there
	}
	_ = l.AddScore(context.Background(), 0.5) // turns the score slots on
	return &decideWorld{l: l, clk: clk, r: rand.New(rand.NewPCG(seed, 41)), share: share, sd: 0.15,
		slow: func(si.Config) time.Duration { return 0 }}
}

func (w *decideWorld) call() si.Report {
	w.clk.Advance(10 * time.Second)
	rep, _ := w.l.ExecuteWithImprovement(context.Background(), "bot", func(ctx context.Context, cfg si.Config) error {
		w.clk.Advance(100*time.Millisecond + w.slow(cfg))
		si.AddCost(ctx, w.cost(cfg))
		if w.r.Float64() < w.share {
			return w.l.AddScore(ctx, scoresim.Beta(w.r, w.quality(cfg), w.sd))
		}
		return nil
	})
	return rep
}

// cheaperTrial explores a candidate at half the cost and quality q
// against the config's 0.85 (σ 0.15), 10 % of calls scored, every call
// costed, for 12,000 calls (33 hours: one try, the next a day after a
// rollback). It returns whether the agent ends on the candidate, and the
// verdict that confirmed it.
func cheaperTrial(seed uint64, q float64) (bool, string) {
	w := newDecideWorld(seed, 0.1, si.WithExploration(si.Exploration{Share: 0.1}),
		si.WithCandidates(si.Candidate{Name: "cheap", Route: "small"}))
	defer w.l.Close()
	w.cost = func(c si.Config) float64 { return map[string]float64{"": 1, "small": 0.5}[c.Route] }
	w.quality = func(c si.Config) float64 { return map[string]float64{"": 0.85, "small": q}[c.Route] }
	verdict := ""
	for range 12_000 {
		rep := w.call()
		if c := rep.Confirmed; c != nil && c.To.Route == "small" {
			verdict = c.Verdict
		}
		if rep.Improvement != nil || rep.Rollback != nil {
			verdict = "" // moved since
		}
	}
	// The calls a change still under verification ran do not adopt it.
	return verdict != "" && w.l.Config("bot").Route == "small", verdict
}

// repairTrial: the config's quality falls 0.85 → 0.60 (σ 0.15) after
// warmup calls; its candidate, a model at 5 × the cost (and slow longer a
// call), answers at 0.85. It returns whether the agent ends on the
// candidate 4,000 calls after the fall, and the last verdict that rolled
// the candidate back.
func repairTrial(seed uint64, share float64, warmup int, slow time.Duration) (bool, string) {
	w := newDecideWorld(seed, share, si.WithCandidates(si.Candidate{Name: "big model", Route: "big"}))
	defer w.l.Close()
	primary := 0.85
	w.quality = func(c si.Config) float64 {
		if c.Route == "big" {
			return 0.85
		}
		return primary
	}
	w.cost = func(c si.Config) float64 { return map[string]float64{"": 1, "big": 5}[c.Route] }
	w.slow = func(c si.Config) time.Duration {
		if c.Route == "big" {
			return slow
		}
		return 0
	}
	for range warmup {
		w.call()
	}
	primary = 0.60
	why := ""
	for range 4000 {
		if c := w.call().Rollback; c != nil && c.To.Route == "big" {
			why = c.Verdict
		}
	}
	return w.l.Config("bot").Route == "big", why
}

// verifyTrial verifies one change under RollbackPolicy.Decide at 10 %
// judging: the config's reference is 500 scored calls of mean 0.85 (5,000
// calls at 10 %); the change's scores have mean 0.85 − drop, beta with σ
// 0.25, or thumbs up and down (1 with that chance, else 0). Every call
// succeeds in 80–120 ms and costs 1. It returns whether the change was
// rolled back, and how many of its calls were scored then.
func verifyTrial(r *rand.Rand, drop float64, thumbs bool) (rolledBack bool, scoredAt int) {
	draw := func(m float64) float64 {
		if thumbs {
			if r.Float64() < m {
				return 1
			}
			return 0
		}
		return scoresim.Beta(r, m, 0.25)
	}
	ms := time.Millisecond
	var e si.Evidence
	var sum, sq float64
	for range qualityRef {
		x := draw(0.85)
		sum, sq = sum+x, sq+x*x
	}
	e.Before = si.Stats{Calls: 16, SuccessRate: 1, TotalLatency: 1600 * ms, SuccessLatency: 1600 * ms,
		Costed: 10 * qualityRef, Cost: 10 * qualityRef, CostPerSuccess: 1}
	scoreStats(&e.Before, qualityRef, sum, sq)
	e.Window = si.Stats{Calls: 200, SuccessRate: 1, TotalLatency: 200 * 100 * ms}
	sum, sq = 0, 0
	p := si.RollbackPolicy{}
	for n := 1; n <= 100_000; n++ {
		d := time.Duration(80+r.IntN(41)) * ms
		a := &e.After
		a.Calls++
		a.TotalLatency += d
		a.SuccessLatency += d
		a.SuccessRate = 1
		a.Costed, a.Cost, a.CostPerSuccess = n, float64(n), 1
		if r.Float64() < 0.1 {
			x := draw(0.85 - drop)
			sum, sq = sum+x, sq+x*x
			scoreStats(a, a.Scored+1, sum, sq)
		}
		switch p.Decide(e).Decision {
		case si.DecisionRollback:
			return true, a.Scored
		case si.DecisionConfirm:
			return false, a.Scored
		}
	}
	panic("no decision")
}

func TestDecideSuite(t *testing.T) {
	loopN, verifyN := decideScale()
	var table strings.Builder
	table.WriteString("| scenario | outcome | goal |\n|---|---|---|\n")
	row := func(scenario, outcome, goal string) {
		fmt.Fprintf(&table, "| %s | %s | %s |\n", scenario, outcome, goal)
	}
	t.Run("cheaper", func(t *testing.T) { decideCheaper(t, loopN, row) })
	t.Run("repair", func(t *testing.T) { decideRepair(t, loopN, row) })
	t.Run("verify", func(t *testing.T) { decideVerify(t, verifyN, row) })
	t.Logf("\n%s", table.String())
}

// decideCheaper runs the cheaper candidate's rows, loopN trials each.
func decideCheaper(t *testing.T, loopN int, row func(scenario, outcome, goal string)) {
	for _, worse := range []float64{0.45, 0.10, 0.02, 0} {
		k, _ := trials(loopN, func(seed uint64) (bool, string) {
			adopted, verdict := cheaperTrial(seed, 0.85-worse)
			if adopted && !strings.Contains(verdict, "cost per successful call 0.5 against 1") {
				t.Errorf("seed %d: adopted without its saving in the verdict: %s", seed, verdict)
			}
			return adopted, ""
		})
		goal := "≤ 1 %"
		if worse < 0.10 {
			goal = "(adopted, the saving in its verdict)"
		}
		row(fmt.Sprintf("cheaper candidate (half the cost) worse by %.2f, 10 %% judged", worse), "adopted in "+share(k, loopN), goal)
		if worse >= 0.10 && float64(k) > 0.01*float64(loopN) {
			t.Errorf("a cheaper candidate worse by %.2f adopted in %s, want at most 1 %%", worse, share(k, loopN))
		}
		if worse == 0 && float64(k) < 0.8*float64(loopN) {
			t.Errorf("a cheaper candidate of equal quality adopted in %s, want at least 80 %%", share(k, loopN))
		}
	}
}

// decideRepair runs the pricier repair's rows, loopN trials each.
func decideRepair(t *testing.T, loopN int, row func(scenario, outcome, goal string)) {
	for _, c := range []struct {
		share  float64
		warmup int
		slow   time.Duration
	}{{1, 500, 0}, {0.1, 2000, 0}, {1, 500, 50 * time.Millisecond}, {0.1, 2000, 50 * time.Millisecond}} {
		k, notes := trials(loopN, func(seed uint64) (bool, string) { return repairTrial(seed, c.share, c.warmup, c.slow) })
		name := fmt.Sprintf("pricier model (5 × the cost) repairing 0.85 → 0.60, %.0f %% judged", 100*c.share)
		if c.slow > 0 {
			name += ", 1.5 × slower"
		}
		row(name, "kept in "+share(k, loopN), "≥ 95 %")
		if float64(k) < 0.95*float64(loopN) {
			t.Errorf("%s: kept in %s, want at least 95 %%; rolled back for: %q", name, share(k, loopN), notes)
		}
	}
}

// decideVerify runs the verification rows, verifyN changes each.
func decideVerify(t *testing.T, verifyN int, row func(scenario, outcome, goal string)) {
	for i, c := range []struct {
		drop   float64
		thumbs bool
	}{{0.10, false}, {0, false}, {0.10, true}, {0, true}} {
		var mu sync.Mutex
		rolled := 0
		within, _ := trials(verifyN, func(seed uint64) (bool, string) {
			rb, scored := verifyTrial(rand.New(rand.NewPCG(seed, uint64(41+i))), c.drop, c.thumbs)
			if rb {
				mu.Lock()
				rolled++
				mu.Unlock()
			}
			return rb && scored <= 400, ""
		})
		law := "scores of σ 0.25"
		if c.thumbs {
			law = "thumbs up and down"
		}
		if c.drop > 0 {
			row(fmt.Sprintf("quality −0.10, 10 %% judged, %s", law), "rolled back within 400 scored calls in "+share(within, verifyN), "≥ 90 % (scores of σ 0.25)")
			if !c.thumbs && float64(within) < 0.9*float64(verifyN) {
				t.Errorf("a −0.10 change rolled back within 400 scored calls in %s, want at least 90 %%", share(within, verifyN))
			}
			continue
		}
		row(fmt.Sprintf("harmless, 10 %% judged, %s", law), "rolled back in "+share(rolled, verifyN), "≤ 1 %")
		if float64(rolled) > 0.01*float64(verifyN) {
			t.Errorf("a harmless change (%s) rolled back in %s, want at most 1 %%", law, share(rolled, verifyN))
		}
	}
}
