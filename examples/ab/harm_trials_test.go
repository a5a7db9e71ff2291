package main

import (
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// harmRuns is how many runs of the harmful-advisor family
// TestHarmfulAdvisorTrials plays per policy (about six harmful tweaks a
// run; 12 s on 2 cores), harmRaceRuns under the race detector (seven
// times slower); HARM_RUNS sets it (the docs' figures: HARM_RUNS=1000).
const (
	harmRuns     = 200
	harmRaceRuns = 8
)

// TestHarmfulAdvisorTrials plays "a harmful advisor, 60 % fail (10
// agents)" under other seeds, as users meet it: the whole loop, the
// built-in thresholds, and a strategy whose every other tweak moves the
// agent to a route that fails 60 % of its calls, proposed when a cluster
// of failures crosses the threshold (so "before" is that cluster: 5
// failures in 6–16 calls, against about 95 % over the window). For every
// method but MethodFixed (whose rule looks on the 10th and the 60th
// call), it asserts that at most 0.1 % of the harmful tweaks are kept (2
// of 6,140 over 1,000 runs under the default and sequential methods, both
// confirmed against a cluster of 8–9 calls they did as well as), and
// that the rest are rolled back after at most 10 calls on average (issue
// 41, item 3; the canary's 9.92 over 200 runs was 10.37 before its early
// rule counted the previous config's calls since the change), asserted
// from 1,000 tweaks on: the 8 runs under the race detector (about 50
// tweaks a method) put the canary's at 10.28. It logs
// the 99th percentile, the most and the share over 30 calls, which stay
// above the 30 (docs/performance.md, "Harmful tweaks"; why:
// TestHelpingChangeDuringAFault).
func TestHarmfulAdvisorTrials(t *testing.T) {
	n := harmRuns
	if raceEnabled {
		n = harmRaceRuns
	}
	if v, err := strconv.Atoi(os.Getenv("HARM_RUNS")); err == nil && v > 0 {
		n = v
	}
	f := harmfulFamily(t)
	for _, p := range policies[:3] {
		var each []int
		harmful, kept := 0, 0
		for tr := range n {
			f.trial = uint64(tr + 1)
			o, err := play(f, &p.p)
			if err != nil {
				t.Fatal(err)
			}
			harmful += o.Harmful
			kept += o.HarmfulKept
			each = append(each, o.HarmfulEach...)
		}
		if len(each) == 0 {
			t.Fatalf("%s: no harmful tweak rolled back in %d runs", p.name, n)
		}
		slices.Sort(each)
		sum, over := 0, 0
		for _, c := range each {
			sum += c
			if c > 30 {
				over++
			}
		}
		mean, p99, most := float64(sum)/float64(len(each)), each[len(each)*99/100], each[len(each)-1]
		lo, hi := scoresim.Wilson95(over, len(each))
		t.Logf("%s: %d harmful tweaks in %d runs, %d rolled back, %d kept; calls under each: mean %.2f, 99th percentile %d, most %d; over 30: %d (%.2f %%, 95 %% interval %.2f–%.2f %%)",
			p.name, harmful, n, len(each), kept, mean, p99, most, over, 100*float64(over)/float64(len(each)), 100*lo, 100*hi)
		if kept*1000 > harmful {
			t.Errorf("%s: %d of %d harmful tweaks kept, want at most 0.1 %%", p.name, kept, harmful)
		}
		if mean > 10 && len(each) >= 1000 {
			t.Errorf("%s: harmful tweaks ran %.2f calls on average; want ≤ 10", p.name, mean)
		}
	}
}

// harmfulFamily is the policy table's harmful advisor over 10 agents.
func harmfulFamily(t *testing.T) family {
	for _, f := range families {
		if f.name == "a harmful advisor, 60 % fail (10 agents)" {
			return f
		}
	}
	t.Fatal("no harmful-advisor family")
	return family{}
}
