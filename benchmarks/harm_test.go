package benchmarks

import (
	"fmt"
	"math"
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

// The harmful-tweak strategy: a strategy that keeps proposing harmful
// tweaks. Each trial is one agent at a base success rate that has run 200
// calls (its analysis window), on which the strategy applies harmTweaks
// tweaks one after another. Each tweak makes harmShare of the calls fail
// on top of the base failures (as the harmful advisor's "cheap" route of
// examples/ab does), and the policy is asked after every call, as the
// loop asks it, until it decides. After a rollback, the agent runs a
// random 16–31 calls under its own config before the strategy's next
// tweak: the next tweak's recent regime ("before", the last 16 calls) is
// the agent's own, and its analysis window (the last 200) holds the
// earlier tweaks' failures, as the loop's would. The figure is the calls
// under each harmful tweak (of its own side, under MethodCanary) before
// it is undone: mean (with its 95 % interval), 99th percentile and most.
//
// At a 90 % base, every method but MethodFixed (whose rule looks on the
// 10th and the 60th call only) undoes a harmful tweak after at most 10
// calls on average and 30 in 99 % of cases; the test asserts it. The most
// stays above 30 (43 default, 71 sequential, 86 canary over 20,000
// tweaks; 0.02 %, 0.4 % and 0.5 % of the tweaks run more than 30 calls),
// and no rule whose false rollbacks stay as they were can bring it there:
// the last tweaks are those whose evidence is weakest, a reference the
// earlier tweaks' failures pulled down to 75–80 % (or 16 calls before the
// tweak that fail far more than the base) and a tweak that, by luck,
// failed only 10–14 of its first 30 calls (55–65 % success, where 64 %
// fail on average: 14 or fewer in 1 tweak in 26, 10 or fewer in 1 in
// 1,600). Against 75–80 %, 60 % is not a fall of twice
// MaxSuccessDrop, and "before" alone (16 calls) is too short to tell 60 %
// from 90 % with odds of 1 in 1,000. Under MethodCanary, the early rule
// also stays silent while the previous config's few calls fail more than
// the reference explains (the fault may be shared): the sides decide.
//
// HARM_TRIALS=5000 gives the docs' figures (docs/performance.md).
//
//	go test ./benchmarks -run '^TestHarmfulTweakSimulation$' -v
//	go test ./benchmarks -run '^$' -bench HarmfulTweakSimulation -benchtime 1x

const (
	// harmTweaks is how many harmful tweaks the strategy applies per
	// trial.
	harmTweaks = 4
	// harmShare is the share of the calls a harmful tweak fails on top of
	// the base failures: from 90 %, a tweak's calls succeed 36 % of the
	// time.
	harmShare = 0.6
	// harmN is the full simulation's trials per policy and base rate
	// (harmTweaks tweaks each); harmCI the test's, which runs in seconds.
	harmN  = 5000
	harmCI = 2000
)

// harmResult is one policy's figures under the harmful-tweak strategy.
type harmResult struct {
	Tweaks     int     // harmful tweaks applied
	RolledBack int     // … rolled back
	Mean, SD   float64 // calls under each until its rollback
	Max        int
	P99        int // the 99th percentile of the calls under each
	Over30     int // rolled back after more than 30 calls, or not at all
}

// over30 is the share of harmful tweaks that ran more than 30 calls, with
// its 95 % (Wilson) interval.
func (r harmResult) over30() (share, lo, hi float64) {
	lo, hi = scoresim.Wilson95(r.Over30, r.Tweaks)
	return float64(r.Over30) / float64(r.Tweaks), lo, hi
}

// interval is the 95 % interval of the mean calls under harm.
func (r harmResult) interval() float64 {
	return 1.96 * r.SD / math.Sqrt(float64(r.RolledBack))
}

// harmRun is the agent's recent calls, oldest first, kept up to the
// analysis window's 200.
type harmRun struct {
	failed []bool
	dur    []time.Duration
}

func (h *harmRun) add(failed bool, d time.Duration) {
	const window = 200
	if len(h.failed) == window {
		h.failed, h.dur = h.failed[1:], h.dur[1:]
	}
	h.failed, h.dur = append(h.failed, failed), append(h.dur, d)
}

// stats counts the last n calls.
func (h *harmRun) stats(n int) si.Stats {
	var s si.Stats
	for i := max(0, len(h.failed)-n); i < len(h.failed); i++ {
		add(&s, h.failed[i], h.dur[i])
	}
	s.ConsecutiveFailures = 0
	return s
}

// simulateHarm runs n trials of the harmful-tweak strategy under p at
// base.
func simulateHarm(p si.RollbackPolicy, base float64, n int, seed uint64) harmResult {
	rng := rand.New(rand.NewPCG(seed, uint64(base*1000)+7))
	var r harmResult
	var sum, sq float64
	var all []int
	for range n {
		var h harmRun
		for range 200 {
			h.add(simCall(rng, base))
		}
		for range harmTweaks {
			rb, calls := harmTweak(rng, p, base, &h)
			r.Tweaks++
			if !rb || calls > 30 {
				r.Over30++
			}
			if rb {
				r.RolledBack++
				sum += float64(calls)
				sq += float64(calls) * float64(calls)
				r.Max = max(r.Max, calls)
				all = append(all, calls)
			}
			for range 16 + rng.IntN(16) {
				h.add(simCall(rng, base))
			}
		}
	}
	if len(all) > 0 {
		slices.Sort(all)
		r.P99 = all[len(all)*99/100]
	}
	if k := float64(r.RolledBack); k > 0 {
		r.Mean = sum / k
		r.SD = math.Sqrt(max(0, sq/k-r.Mean*r.Mean))
	}
	return r
}

// harmTweak verifies one harmful tweak on the agent h, and returns whether
// it was rolled back and after how many calls under it.
func harmTweak(rng *rand.Rand, p si.RollbackPolicy, base float64, h *harmRun) (rolledBack bool, calls int) {
	e := si.Evidence{Before: h.stats(16), Window: h.stats(200)}
	fraction := 0.0
	if p.Method == si.MethodCanary {
		fraction = si.DefaultCanaryFraction
	}
	for range 100000 {
		if rng.Float64() < fraction {
			failed, d := simCall(rng, base)
			add(&e.Control, failed, d)
			add(&e.StreakControl, failed, d)
			h.add(failed, d)
		} else {
			failed, d := simCall(rng, base)
			failed = failed || rng.Float64() < harmShare
			if !failed || e.After.ConsecutiveFailures == 0 {
				e.StreakControl = si.Stats{}
			}
			add(&e.After, failed, d)
			h.add(failed, d)
		}
		switch p.Decide(e).Decision {
		case si.DecisionRollback:
			return true, e.After.Calls
		case si.DecisionConfirm:
			return false, e.After.Calls
		}
	}
	panic("no decision after 100,000 calls")
}

// TestHarmfulTweakSimulation reports each method's calls under a harmful
// tweak, and asserts at a 90 % base, under every method, that at least
// 99.9 % of harmful tweaks are rolled back, after at most 10 calls under
// each on average and at most 30 in 99 % of cases (issue 41). The most is
// reported, not asserted: see the comment at the top. Under -race, the
// 90 % rows alone. HARM_TRIALS sets the trials per row (default harmCI;
// the docs' figures: HARM_TRIALS=5000).
func TestHarmfulTweakSimulation(t *testing.T) {
	n := harmCI
	if v, err := strconv.Atoi(os.Getenv("HARM_TRIALS")); err == nil && v > 0 {
		n = v
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| policy | base | rolled back | calls under harm: mean (95 %% interval) | 99th percentile | max | more than 30 (95 %% interval) |\n|---|---|---|---|---|---|---|\n")
	for _, sp := range simPolicies[1:] {
		for _, base := range simBases {
			if raceEnabled && base != 0.90 {
				continue
			}
			r := simulateHarm(sp.p, base, n, 1)
			o, lo, hi := r.over30()
			fmt.Fprintf(&table, "| %s | %.0f%% | %d/%d | %.2f (± %.2f) | %d | %d | %.3f%% (%.3f–%.3f%%) |\n", sp.name, 100*base, r.RolledBack, r.Tweaks, r.Mean, r.interval(), r.P99, r.Max, 100*o, 100*lo, 100*hi)
			if base != 0.90 {
				continue
			}
			if float64(r.RolledBack) < 0.999*float64(r.Tweaks) {
				t.Errorf("%s: %d of %d harmful tweaks rolled back, want at least 99.9%%", sp.name, r.RolledBack, r.Tweaks)
			}
			if r.Mean > 10 || r.P99 > 30 {
				t.Errorf("%s: %.2f calls under each harmful tweak on average, %d in 99%% of cases; want at most 10 and 30", sp.name, r.Mean, r.P99)
			}
		}
	}
	t.Logf("%d trials of %d harmful tweaks per row:\n%s", n, harmTweaks, table.String())
}

// BenchmarkHarmfulTweakSimulation reports each policy's calls under a
// harmful tweak before its rollback, over harmN trials.
func BenchmarkHarmfulTweakSimulation(b *testing.B) {
	for _, sp := range simPolicies[1:] {
		for _, base := range simBases {
			b.Run(fmt.Sprintf("%s/base=%.0f", sp.name, 100*base), func(b *testing.B) {
				var r harmResult
				for b.Loop() {
					r = simulateHarm(sp.p, base, benchTrials(harmN), 1)
				}
				b.ReportMetric(r.Mean, "calls-harm-mean")
				b.ReportMetric(r.interval(), "calls-harm-ci95")
				b.ReportMetric(float64(r.P99), "calls-harm-p99")
				b.ReportMetric(float64(r.Max), "calls-harm-max")
				b.ReportMetric(100*float64(r.RolledBack)/float64(r.Tweaks), "undone%")
			})
		}
	}
}
