package selfimprove_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFallJustBeforeAnExplorationIsAnswered: a fall of quality that
// begins shortly before an exploration is due, and that the quality watch
// has not fired on yet, is still answered as a fall. The primary answers
// at 0.85 (every call scored, σ 0.25), its one candidate, a backup model
// on another route, at 0.80; Exploration{Share: 0.05} with its default
// MinSamples (100), so that the first exploration is due at the 100th
// scored call. The primary falls to 0.60 at a call drawn in the 40 before
// (60 to 99). Without exploration the watch sees the fall and the agent
// moves to the candidate (TestQualityDropMovesToACandidate). With it, an
// exploration that started in the fall judged the candidate against a
// reference of mostly pre-fall scores, rolled it back for no gain and
// refused it for a day: the fall, seen once the exploration ended, had no
// candidate left and the agent stayed on the fallen primary. Before the
// exploration waited for the watch's run of low scores to close, 124 of
// 200 trials (QUALITY_SEEDS=200) explored in the fall and 119 were left on
// the fallen primary 1,000 calls after it; with the wait, 9 and 8 (the
// fall a few scores old, its first scores not yet below the watch's
// mean), and 9 and 1 since a candidate explored for no gain may answer a
// fall (TestFallAnsweredWithACandidateExploredBefore); 40 trials by
// default. Waiting only while the statistic was above half the watch's
// threshold left 63 of 200 on the fallen primary.
func TestFallJustBeforeAnExplorationIsAnswered(t *testing.T) {
	const after = 1000
	trials, stuck, explored := 0, 0, 0
	var at []int
	for seed := range seeds(40) {
		w, primary := exploredWorld(t, seed)
		fall := 60 + rand.New(rand.NewPCG(seed, 5)).IntN(40)
		for i := 1; i < fall; i++ {
			if rep := w.call(); rep.Improvement != nil || rep.ImprovementTriggered {
				t.Fatalf("seed %d: healthy call %d triggered a change: %+v", seed, i, rep.Improvement)
			}
		}
		*primary = 0.60 // the provider's silent model update
		confirmed, exploring := 0, false
		for i := 1; i <= after; i++ {
			rep := w.call()
			if c := rep.Improvement; c != nil && strings.HasPrefix(c.Reason, "exploring candidate") {
				exploring = true
			}
			if c := rep.Confirmed; c != nil && c.To.Route == "backup" && confirmed == 0 {
				confirmed = i
			}
		}
		trials++
		if exploring {
			explored++
		}
		if route := w.e.l.Config("bot").Route; route != "backup" {
			stuck++
			t.Logf("seed %d: the fall at call %d; %d calls after it the agent is on route %q (an exploration in the fall: %v)", seed, fall, after, route, exploring)
			continue
		}
		at = append(at, confirmed)
	}
	t.Logf("%d of %d trials still on the fallen primary %d calls after the fall; %d of %d explored the candidate in the fall", stuck, trials, after, explored, trials)
	if len(at) > 0 {
		m, p90, hi := pct(at)
		t.Logf("the move to the candidate confirmed at call (after the fall) median %d, 90th percentile %d, max %d", m, p90, hi)
	}
	if stuck > trials/10 {
		t.Errorf("%d of %d trials left on the fallen primary %d calls after the fall, want at most 10 %%", stuck, trials, after)
	}
}

// TestFallAnsweredWithACandidateExploredBefore: a candidate that an
// exploration rolled back for bringing no gain over the healthy config
// still answers a later fall of that config. The primary answers at 0.85
// (every call scored, σ 0.25), its one candidate, a backup model, at
// 0.80; Exploration{Share: 0.05}. The exploration of the candidate is
// rolled back for no gain; 300 calls later (50 minutes, well within
// RefuseFor's day) the primary falls to 0.60. Before, the refusal held
// for every cluster: the fall had no candidate left and, with no ladder,
// was answered by a proposal, the agent left on the fallen primary in
// every trial. Now the refusal holds for explorations only
// (Tweak.Explored), and the fall moves the agent to the candidate. A
// trial whose exploration showed the candidate worse (a refusal for
// harm, which stays whole) is left out.
func TestFallAnsweredWithACandidateExploredBefore(t *testing.T) {
	const after = 1000
	trials, moved, shown := 0, 0, 0
	for seed := range seeds(20) {
		w, primary := exploredWorld(t, seed)
		var undone *si.Change
		for i := 0; i < 5000 && undone == nil; i++ {
			if c := w.call().Rollback; c != nil && c.To.Route == "backup" {
				undone = c
			}
		}
		if undone == nil {
			t.Fatalf("seed %d: the candidate was not explored and rolled back in 5,000 calls", seed)
		}
		if !strings.Contains(undone.Verdict, "no gain") {
			// Shown worse than the healthy config: refused for any
			// fall too (a refusal for harm stays whole).
			shown++
			continue
		}
		for range 300 {
			w.call()
		}
		*primary = 0.60
		for range after {
			w.call()
		}
		trials++
		if route := w.e.l.Config("bot").Route; route == "backup" {
			moved++
		} else {
			t.Logf("seed %d: %d calls after the fall the agent is on route %q", seed, after, route)
		}
	}
	t.Logf("%d of %d trials moved to the candidate explored before, within %d calls of the fall; %d more rolled the candidate back as worse (left out)", moved, trials, after, shown)
	if trials < 2*shown {
		t.Errorf("only %d of %d explorations rolled back for no gain", trials, trials+shown)
	}
	if moved < trials*9/10 {
		t.Errorf("%d of %d trials moved to the candidate within %d calls of the fall, want at least 90 %%", moved, trials, after)
	}
}

// exploredWorld is the world of the tests above: agent "bot" with every
// call scored, its primary at *primary (0.85 until the test changes it),
// one candidate, a backup model, at 0.80, and Exploration{Share: 0.05}.
func exploredWorld(t *testing.T, seed uint64) (*candWorld, *float64) {
	w := newCandWorld(t, 1, seed+1, si.WithExploration(si.Exploration{Share: 0.05}),
		si.WithCandidates(si.Candidate{Name: "backup", Route: "backup"}))
	primary := 0.85
	w.quality = func(c si.Config) float64 {
		if c.Route == "backup" {
			return 0.80
		}
		return primary
	}
	return w, &primary
}
