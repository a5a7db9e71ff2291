package main

import (
	"strings"
	"testing"
)

// TestAB asserts the A/B's figures: the loop does strictly better than no
// loop in every scenario, every harmful tweak is rolled back within 10
// calls (it always fails; the reference it is judged against, a fault
// under way, fails half the time), and no rolled-back tweak is applied
// again.
func TestAB(t *testing.T) {
	for _, sc := range scenarios {
		with, err := simulate(sc, true)
		if err != nil {
			t.Fatal(err)
		}
		without, err := simulate(sc, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: success %.1f%% vs %.1f%%, recovered %v vs %v, harmful %s, re-applied %d",
			sc.name, with.rate(), without.rate(), with.Recovered, without.Recovered, harmfulCell(with), with.Reapplied)
		if with.rate() <= without.rate() {
			t.Errorf("%s: success %.1f%% with the loop, %.1f%% without", sc.name, with.rate(), without.rate())
		}
		if with.Recovered[0] < 0 {
			t.Errorf("%s: never recovered with the loop", sc.name)
		}
		if with.HarmfulRolledBack != with.Harmful || with.HarmfulCalls > 10 {
			t.Errorf("%s: %d harmful tweaks, %d rolled back, after up to %d calls", sc.name, with.Harmful, with.HarmfulRolledBack, with.HarmfulCalls)
		}
		if with.Reapplied != 0 {
			t.Errorf("%s: %d rolled-back tweaks applied again", sc.name, with.Reapplied)
		}
	}
	if h, _ := simulate(scenarios[3], true); h.Harmful == 0 {
		t.Error("the harmful strategy's tweak was never tried")
	}
}

// TestABDeterministic checks that two runs print the same figures.
func TestABDeterministic(t *testing.T) {
	var a, b strings.Builder
	if err := run(&a); err != nil {
		t.Fatal(err)
	}
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("two runs differ:\n%s\n---\n%s", a.String(), b.String())
	}
}
