package selfimprove_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// The figures of the quality watch (docs/quality.md, "Quality as a
// trigger"): the real Loop on a fake clock, tracking only (no strategy:
// a trigger is Report.ImprovementTriggered), the default policy but for
// a QualityCooldown of 1ns (every false alarm counts), every call scored,
// a call a second. The test runs a light form; the documented figures
// come from
//
//	QUALITY_WATCH_SCALE=10 go test -count=1 -run TestQualityWatchFigures -v .
//
// which runs 10 times as many trials and healthy calls.

// watchLaw is a law of scores: beta-distributed of mean and standard
// deviation sd, or thumbs up and down (1 with probability mean, else 0)
// for sd 0.
type watchLaw struct{ mean, sd float64 }

func (l watchLaw) String() string {
	if l.sd == 0 {
		return fmt.Sprintf("thumbs up %.0f%%", 100*l.mean)
	}
	return fmt.Sprintf("mean %.2f σ %.2f", l.mean, l.sd)
}

func (l watchLaw) draw(r *rand.Rand) float64 {
	if l.sd == 0 {
		if r.Float64() < l.mean {
			return 1
		}
		return 0
	}
	return scoresim.Beta(r, l.mean, l.sd)
}

// watchSim is one Loop of many agents, each an independent trial.
type watchSim struct {
	t   *testing.T
	l   *si.Loop
	clk *fakeclock.Clock
	r   *rand.Rand
}

func newWatchSim(t *testing.T, seed uint64) *watchSim {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithLogger(quiet), si.WithNotifier(),
		si.WithStrategy(nil), si.WithRollbackPolicy(si.RollbackPolicy{QualityCooldown: time.Nanosecond}), noFloor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	scoringOn(t, l)
	return &watchSim{t: t, l: l, clk: clk, r: rand.New(rand.NewPCG(seed, 41))}
}

// call runs a call of agent id scored score and reports whether it
// started an analysis.
func (w *watchSim) call(id string, score float64) bool {
	w.clk.Advance(time.Second)
	rep, err := w.l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
		return w.l.AddScore(ctx, score)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return rep.ImprovementTriggered
}

// watchScale returns the trials' scale: QUALITY_WATCH_SCALE (default 1),
// a fifth of it under -short or the race detector.
func watchScale() float64 {
	scale := 1.0
	if f, err := strconv.ParseFloat(os.Getenv("QUALITY_WATCH_SCALE"), 64); err == nil && f > 0 {
		scale = f
	}
	if testing.Short() || raceOn {
		scale /= 5
	}
	return scale
}

// medianInterval returns the median of sorted xs and its 95 %
// distribution-free interval (the order statistics n/2 ∓ 0.98·√n).
func medianInterval(xs []int) (med, lo, hi int) {
	n := len(xs)
	d := int(math.Ceil(0.98 * math.Sqrt(float64(n))))
	return xs[n/2], xs[max(n/2-d, 0)], xs[min(n/2+d, n-1)]
}

// watchFall runs trials agents, each with warmup scored calls of law
// before, then calls of law after until the watch fires (at most 500),
// and returns the scored calls of the fall it took, sorted, and the
// alarms among the warmup calls.
func watchFall(t *testing.T, trials, warmup int, before, after watchLaw) (at []int, alarms int) {
	w := newWatchSim(t, 1)
	for i := range trials {
		id := "fall-" + strconv.Itoa(i)
		for range warmup {
			if w.call(id, before.draw(w.r)) {
				alarms++
			}
		}
		n := 1
		for ; n < 500 && !w.call(id, after.draw(w.r)); n++ {
		}
		at = append(at, n)
	}
	slices.Sort(at)
	return at, alarms
}

// watchHealthy runs agents new agents of law for calls scored calls each
// and returns the analyses they started.
func watchHealthy(t *testing.T, seed uint64, agents, calls int, law watchLaw) int {
	w := newWatchSim(t, seed)
	alarms := 0
	for i := range agents {
		id := "healthy-" + strconv.Itoa(i)
		for range calls {
			if w.call(id, law.draw(w.r)) {
				alarms++
			}
		}
	}
	return alarms
}

// TestQualityWatchFigures: a fall of the mean score from 0.85 to 0.60 at
// σ 0.15, after 200 healthy scored calls, is seen after at most 15
// scored calls in the median (the watch before took 39); healthy agents
// of several laws, thumbs up and down among them, each from its first
// call, start at most 1 analysis per 100,000 scored calls.
func TestQualityWatchFigures(t *testing.T) {
	scale := watchScale()
	trials := int(1000 * scale)
	at, early := watchFall(t, trials, 200, watchLaw{0.85, 0.15}, watchLaw{0.60, 0.15})
	med, lo, hi := medianInterval(at)
	k := 0
	for _, n := range at {
		if n <= 15 {
			k++
		}
	}
	wlo, whi := scoresim.Wilson95(k, len(at))
	t.Logf("0.85 → 0.60 (σ 0.15), %d trials: seen after a median %d scored calls (95%% interval %d–%d), 90th percentile %d, max %d; within 15: %.1f%% (%.1f–%.1f%%); %d alarms in the %d healthy calls before",
		len(at), med, lo, hi, at[len(at)*9/10], at[len(at)-1], 100*float64(k)/float64(len(at)), 100*wlo, 100*whi, early, 200*trials)
	if med > 15 {
		t.Errorf("median %d scored calls to see the fall, want at most 15", med)
	}
	agents, calls := int(25*scale), 4000
	total, alarms := 0, 0
	for i, law := range []watchLaw{{0.85, 0.15}, {0.85, 0.25}, {0.6, 0.15}, {0.6, 0.25}, {0.95, 0.1}, {0.6, 0}, {0.85, 0}, {0.95, 0}} {
		a := watchHealthy(t, uint64(10+i), agents, calls, law)
		n := agents * calls
		_, up := scoresim.Wilson95(a, n)
		t.Logf("healthy, %s: %d analyses in %d scored calls (%d agents): %.2f per 100,000 (95%% interval up to %.2f)",
			law, a, n, agents, 1e5*float64(a)/float64(n), 1e5*up)
		total, alarms = total+n, alarms+a
	}
	total, alarms = total+200*trials, alarms+early
	_, up := scoresim.Wilson95(alarms, total)
	t.Logf("healthy, all: %d analyses in %d scored calls: %.2f per 100,000 (95%% interval up to %.2f)", alarms, total, 1e5*float64(alarms)/float64(total), 1e5*up)
	if float64(alarms) > float64(total)/1e5 {
		t.Errorf("%d analyses in %d healthy scored calls, want at most 1 per 100,000", alarms, total)
	}
}
