package selfimprove_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// TestCandidatesStrategy: the built-in strategy answers with the next
// untried, unrefused candidate, when a fall of success leaves it no safe
// move and first when quality falls; then a proposal.
func TestCandidatesStrategy(t *testing.T) {
	v2 := si.Candidate{Name: "v2", Params: map[string]string{"prompt": "v2"}}
	big := si.Candidate{Route: "big"}
	cur := si.Config{Timeout: time.Second, Params: map[string]string{"prompt": "v1", "temperature": "0.7"}}
	at := func(c si.Candidate) si.Config {
		cfg := si.Config{Timeout: time.Second, Route: c.Route, Params: map[string]string{"prompt": "v1", "temperature": "0.7"}}
		for k, v := range c.Params {
			cfg.Params[k] = v
		}
		return cfg
	}
	bad := clusters(failure.ClassBadRequest, 5)
	drop := si.Stats{Scored: 80, Quality: 0.6}
	for _, tc := range []struct {
		name     string
		cl       []si.Cluster
		drop     si.Stats
		cands    []si.Candidate
		rejected []si.Tweak
		routes   si.Routes
		want     *si.Config // nil: a proposal for a person
		reason   string
	}{
		{"no safe move: the first candidate", bad, si.Stats{}, []si.Candidate{v2, big}, nil, si.Routes{}, ptr(at(v2)), `no safe move left for bad_request: candidate "v2"`},
		{"the current one skipped", bad, si.Stats{}, []si.Candidate{{Params: map[string]string{"prompt": "v1"}}, big}, nil, si.Routes{}, ptr(at(big)), `candidate "candidate 2"`},
		{"a refused one skipped", bad, si.Stats{}, []si.Candidate{v2, big}, []si.Tweak{{Config: at(v2), Cluster: string(failure.ClassBadRequest)}}, si.Routes{}, ptr(at(big)), `"candidate 2"`},
		{"refused for another cluster: tried", bad, si.Stats{}, []si.Candidate{v2}, []si.Tweak{{Config: at(v2), Cluster: "0123456789abcdef"}}, si.Routes{}, ptr(at(v2)), `"v2"`},
		{"all refused: a proposal", bad, si.Stats{}, []si.Candidate{v2}, []si.Tweak{{Config: at(v2)}}, si.Routes{}, nil, ""},
		{"auth: a person's fix", clusters(failure.ClassAuth, 5), si.Stats{}, []si.Candidate{v2}, nil, si.Routes{}, nil, ""},
		{"a safe move first", clusters(failure.ClassTimeout, 5), si.Stats{}, []si.Candidate{v2}, nil, si.Routes{}, ptr(si.Config{Timeout: 1500 * time.Millisecond, Params: cur.Params}), "raise the timeout"},
		{"quality: a candidate before the ladder", nil, drop, []si.Candidate{v2}, nil, si.Routes{Primary: "a", Fallbacks: []string{"b"}}, ptr(at(v2)), `try candidate "v2": the answers got worse without failing; mean quality fell to 0.600 (80 scored calls), no earlier figure`},
		{"quality: the ladder when no candidate is left", nil, drop, []si.Candidate{v2}, []si.Tweak{{Config: at(v2)}}, si.Routes{Primary: "a", Fallbacks: []string{"b"}}, ptr(at(si.Candidate{Route: "b"})), `move to route "b": the answers on route "a" got worse`},
		{"quality: a dead route skipped", nil, drop, []si.Candidate{{Route: "dead"}}, nil, si.Routes{}, nil, ""},
	} {
		an := si.Analysis{Config: cur, Clusters: tc.cl, QualityDrop: tc.drop, Candidates: tc.cands, Rejected: tc.rejected, Routes: tc.routes,
			DeadRoutes: []si.DeadRoute{{Route: "dead"}}}
		tw, err := (&si.BuiltinStrategy{}).Analyze(context.Background(), an)
		if err != nil || tw == nil {
			t.Fatalf("%s: %v, %v", tc.name, tw, err)
		}
		if tc.want == nil {
			if !tw.Review {
				t.Errorf("%s: %+v, want a proposal", tc.name, tw)
			}
			continue
		}
		if tw.Review || !tw.Config.Equal(*tc.want) || !strings.Contains(tw.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %+v with a reason naming %q", tc.name, tw, *tc.want, tc.reason)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestCandidatesBounds: candidates and exploration outside their bounds
// are refused, naming the field; Candidates returns a copy.
func TestCandidatesBounds(t *testing.T) {
	e := newEnv(t)
	for _, cs := range [][]si.Candidate{
		{{Name: "nothing"}},
		{{Name: strings.Repeat("n", 65), Route: "r"}},
		{{Route: strings.Repeat("r", 257)}},
		{{Params: map[string]string{"p": strings.Repeat("v", 257)}}},
		slices.Repeat([]si.Candidate{{Route: "r"}}, 17),
	} {
		if err := e.l.SetCandidates("bot", cs); !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "candidates") {
			t.Errorf("SetCandidates(%.40v) = %v, want ErrInvalidOption naming the field", cs, err)
		}
	}
	if err := e.l.SetCandidates("", []si.Candidate{{Route: "r"}}); !errors.Is(err, si.ErrInvalidAgentID) {
		t.Errorf("SetCandidates for no agent = %v", err)
	}
	cs := []si.Candidate{{Params: map[string]string{"prompt": "v2"}}}
	if err := e.l.SetCandidates("bot", cs); err != nil {
		t.Fatal(err)
	}
	cs[0].Params["prompt"] = "changed"
	got := e.l.Candidates("bot")
	got[0].Params["prompt"] = "changed too"
	if p := e.l.Candidates("bot")[0].Params["prompt"]; p != "v2" || e.l.Candidates("other") != nil {
		t.Errorf("Candidates = %q, %v: not a copy, or another agent's", p, e.l.Candidates("other"))
	}
	for _, o := range []si.Option{si.WithCandidates(si.Candidate{}), si.WithExploration(si.Exploration{Share: 0.6}), si.WithExploration(si.Exploration{MinSamples: -1})} {
		if _, err := si.New(si.WithDir(t.TempDir()), o); !errors.Is(err, si.ErrInvalidOption) {
			t.Errorf("New = %v, want ErrInvalidOption", err)
		}
	}
}

// candWorld runs the calls of agent "bot", one every 10 seconds, each
// scored with probability share, with scores of mean quality(cfg) and σ
// sd (0.25), and with a cost of cost(cfg) when it is not negative.
type candWorld struct {
	e       *env
	r       *rand.Rand
	share   float64
	sd      float64
	quality func(si.Config) float64
	cost    func(si.Config) float64
}

func newCandWorld(t *testing.T, share float64, seed uint64, opts ...si.Option) *candWorld {
	e := newEnv(t, append([]si.Option{si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{})}, opts...)...)
	scoringOn(t, e.l)
	return &candWorld{e: e, r: rand.New(rand.NewPCG(seed, 31)), share: share, sd: 0.25,
		quality: func(si.Config) float64 { return 0.85 }, cost: func(si.Config) float64 { return -1 }}
}

func (w *candWorld) call() si.Report {
	w.e.clk.Advance(10 * time.Second)
	rep, err := w.e.l.ExecuteWithImprovement(context.Background(), "bot", func(ctx context.Context, cfg si.Config) error {
		w.e.clk.Advance(100 * time.Millisecond)
		if c := w.cost(cfg); c >= 0 {
			si.AddCost(ctx, c)
		}
		if w.r.Float64() < w.share {
			return w.e.l.AddScore(ctx, scoresim.Beta(w.r, w.quality(cfg), w.sd))
		}
		return nil
	})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return rep
}

// seeds is the number of trials of a scenario: n, or QUALITY_SEEDS;
// under the race detector the first quarter of them (at least 3), where
// they took 65 s of the package's 250: .ci/run runs them all without it
// (its step for the long simulations). Each trial drives one call at a
// time; the detector still sees every path they take.
func seeds(n uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("QUALITY_SEEDS"), 10, 32); err == nil {
		return v // for the figures of docs/quality.md
	}
	if si.TestingRace {
		return max((n+3)/4, 3)
	}
	return n
}

// allSeeds is seeds without the race detector's cut, for a figure held to
// a goal over all n trials (TestBestOfFourCandidates's ratio of calls).
func allSeeds(n uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("QUALITY_SEEDS"), 10, 32); err == nil {
		return v
	}
	return n
}

// pct returns the median, 90th percentile and max of xs.
func pct(xs []int) (int, int, int) {
	slices.Sort(xs)
	return xs[len(xs)/2], xs[len(xs)*9/10], xs[len(xs)-1]
}

// TestQualityDropMovesToACandidate: a silent regression of the primary
// (mean 0.85 → 0.60, σ 0.25) with a candidate prompt at 0.80 and no
// route ladder: the agent moves to the candidate and confirms it within
// 300 calls when every call is scored, within 1,500 when 10 % are (in
// at least 95 % of trials), and stays there.
func TestQualityDropMovesToACandidate(t *testing.T) {
	for _, tc := range []struct {
		name           string
		share          float64
		warmup, within int
	}{
		{"every call scored", 1, 500, 300},
		{"10% scored", 0.1, 2000, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var at []int
			in := 0
			for seed := range seeds(20) {
				w := newCandWorld(t, tc.share, seed+1)
				if err := w.e.l.SetCandidates("bot", []si.Candidate{{Name: "prompt v2", Params: map[string]string{"prompt": "v2"}}}); err != nil {
					t.Fatal(err)
				}
				primary := 0.85
				w.quality = func(c si.Config) float64 {
					if c.Params["prompt"] == "v2" {
						return 0.80
					}
					return primary
				}
				for i := range tc.warmup {
					if rep := w.call(); rep.Improvement != nil || rep.ImprovementTriggered {
						t.Fatalf("seed %d: healthy call %d triggered a change: %+v", seed, i, rep.Improvement)
					}
				}
				primary = 0.60 // the provider's silent model update
				confirmed := 0
				for i := 1; i <= 3*tc.within && confirmed == 0; i++ {
					rep := w.call()
					if rep.Rollback != nil {
						t.Fatalf("seed %d: call %d rolled back %v: %s", seed, i, rep.Rollback.To, rep.Rollback.Verdict)
					}
					if c := rep.Confirmed; c != nil {
						if c.To.Params["prompt"] != "v2" || !strings.Contains(c.Reason, `candidate "prompt v2"`) || !strings.Contains(c.Verdict, "mean quality") {
							t.Fatalf("seed %d: confirmed %+v", seed, c)
						}
						confirmed = i
					}
				}
				at = append(at, confirmed)
				if confirmed == 0 {
					t.Errorf("seed %d: the move not confirmed within %d calls after the fall", seed, 3*tc.within)
				} else if confirmed <= tc.within {
					in++
				}
				for range 1000 {
					w.call()
				}
				if got := w.e.l.Config("bot").Params["prompt"]; got != "v2" {
					t.Errorf("seed %d: prompt %q 1,000 calls after the move, want it to stay on the candidate", seed, got)
				}
			}
			m, p90, hi := pct(at)
			share := float64(in) / float64(len(at))
			t.Logf("the move to the candidate confirmed at call (after the fall) median %d, 90th percentile %d, max %d; %.1f%% within %d, in %d trials",
				m, p90, hi, 100*share, tc.within, len(at))
			if share < 0.95 {
				t.Errorf("%.1f%% of the moves confirmed within %d calls after the fall, want at least 95%%", 100*share, tc.within)
			}
		})
	}
}

// TestExplorationCost: a healthy agent (mean quality 0.85, cost 1 a
// call, every call scored) explores its candidates with a share of 5 %:
// one of equal quality at 5× the cost is rolled back and refused, one of
// equal quality at half the cost is confirmed, and the explored calls stay
// within the share.
func TestExplorationCost(t *testing.T) {
	const calls = 20_000
	var pricey, cheap []int
	most, again, onCheap, trials := 0.0, 0, 0, int(seeds(20))
	falseQ := 0
	for seed := range seeds(20) {
		w := newCandWorld(t, 1, seed+1, si.WithExploration(si.Exploration{Share: 0.05}),
			si.WithCandidates(si.Candidate{Name: "pricey", Route: "big"}, si.Candidate{Name: "cheap", Route: "small"}))
		w.cost = func(c si.Config) float64 { return map[string]float64{"": 1, "big": 5, "small": 0.5}[c.Route] }
		explored, rolled, confirmed, unshown := 0, 0, 0, 0
		// The calls go on past the last while a change is verified.
		for i := 1; i <= calls || w.e.l.Config("bot").Route == "big" && i <= calls+100; i++ {
			rep := w.call()
			if c := rep.Improvement; c != nil && !strings.HasPrefix(c.Reason, "exploring candidate") {
				t.Fatalf("seed %d: call %d applied %+v", seed, i, c)
			}
			if c := rep.Rollback; c != nil {
				explored += c.After.Calls
				if c.To.Route == "small" && strings.Contains(c.Verdict, "quality was not shown") {
					unshown++ // the saving waits for its quality (issue 41): refused for a day, then tried again
					continue
				}
				if c.To.Route == "small" && strings.Contains(c.Verdict, "scored lower") {
					falseQ++ // the quality test's false alarm (at 3 %), also refused for a day
					unshown++
					continue
				}
				if c.To.Route != "big" || !strings.Contains(c.Verdict, "cost per successful call rose") {
					t.Fatalf("seed %d: call %d rolled back %s: %s", seed, i, c.To.Route, c.Verdict)
				}
				if rolled++; rolled == 1 {
					pricey = append(pricey, c.After.Calls)
				}
				if rolled == 2 && confirmed == 0 && unshown == 0 {
					t.Fatalf("seed %d: call %d rolled the pricey one back again before the cheap one was tried", seed, i)
				}
			}
			if c := rep.Confirmed; c != nil {
				explored += c.After.Calls
				if c.To.Route != "small" || confirmed > 0 {
					t.Fatalf("seed %d: call %d confirmed %s: %s", seed, i, c.To.Route, c.Verdict)
				}
				confirmed = i
				cheap = append(cheap, c.After.Calls)
			}
		}
		if unshown > 0 {
			again++
		}
		if got := w.e.l.Config("bot").Route; got == "small" {
			onCheap++
		}
		// The pricey one is refused for a day (8,640 calls), then tried
		// again from the cheap one, and rolled back again.
		most = max(most, float64(explored)/calls)
		// The share holds in the long run: after an exploration of n
		// calls the next waits n × (1 − Share) / Share calls. Within a
		// window that ends during that wait it is more: the pricey
		// candidate may run up to 400 calls, waiting for its quality.
		if rolled < 2 || rolled > 3 || float64(explored) > 0.065*calls {
			t.Errorf("seed %d: %d rollbacks, %d explored calls in %d, want 2 or 3 and at most 6.5 %%", seed, rolled, explored, calls)
		}
	}
	// A saving waits for its quality (issue 41): a candidate of equal
	// quality whose scores do not show it within the margin in 400 is
	// rolled back, refused for a day, and tried again.
	if falseQ > max(1, trials*3/100) {
		t.Errorf("the cheap candidate of equal quality rolled back for lower scores in %d of %d trials, want at most 3 %%", falseQ, trials)
	}
	if onCheap < trials*95/100 {
		t.Errorf("%d of %d trials end on the cheap candidate, want at least 95 %%", onCheap, trials)
	}
	m, p90, hi := pct(pricey)
	t.Logf("%d of %d trials end on the cheap candidate", onCheap, trials)
	t.Logf("5x the cost: rolled back after median %d calls, 90th percentile %d, max %d, in %d trials", m, p90, hi, len(pricey))
	m, p90, hi = pct(cheap)
	t.Logf("half the cost: confirmed after median %d calls, 90th percentile %d, max %d, in %d trials (%d of them at a later try, the first rolled back with its quality not shown)", m, p90, hi, len(cheap), again)
	t.Logf("explored calls: at most %.2f%% of %d calls (share 5%%)", 100*most, calls)
}

// TestExplorationNoGain: a candidate of equal quality and cost, explored,
// is rolled back for want of a gain, also across a restart, and refused
// for RefuseFor; then tried again.
func TestExplorationNoGain(t *testing.T) {
	var after []int
	for seed := range seeds(5) {
		opts := []si.Option{si.WithExploration(si.Exploration{Share: 0.1}),
			si.WithCandidates(si.Candidate{Name: "same", Params: map[string]string{"prompt": "v2"}})}
		w := newCandWorld(t, 1, seed+1, opts...)
		w.cost = func(si.Config) float64 { return 1 }
		applied, rolled := 0, 0
		for i := 1; i <= 12_000; i++ {
			rep := w.call()
			if rep.Improvement != nil {
				if applied++; applied == 1 {
					// A restart while it is verified: it stays an
					// exploration.
					w.e.clk.Advance(time.Second)
					if err := w.e.l.Close(); err != nil {
						t.Fatal(err)
					}
					w.e.open(append([]si.Option{si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{})}, opts...)...)
					scoringOn(t, w.e.l)
				}
			}
			if rep.Confirmed != nil {
				t.Fatalf("seed %d: call %d confirmed %+v", seed, i, rep.Confirmed)
			}
			if c := rep.Rollback; c != nil {
				if !strings.Contains(c.Verdict, "brought no gain") {
					t.Fatalf("seed %d: rolled back: %s", seed, c.Verdict)
				}
				if rolled++; rolled == 1 {
					after = append(after, c.After.Calls)
				}
			}
			if i == 8640 && (applied != 1 || rolled != 1) {
				t.Fatalf("seed %d: in a day, %d explorations, %d rolled back; want 1 refused for a day", seed, applied, rolled)
			}
		}
		if applied != 2 {
			t.Errorf("seed %d: %d explorations in 12,000 calls, want 2 (the second after the day's refusal)", seed, applied)
		}
	}
	m, p90, hi := pct(after)
	t.Logf("equal quality and cost: rolled back for no gain after median %d calls, 90th percentile %d, max %d, in %d trials", m, p90, hi, len(after))
}

// TestFailuresMoveThroughCandidates: an agent whose requests begin to
// fail validation (bad_request, no safe move of the strategy's own) half
// the time, after 1,000 healthy calls, tries its candidates one at a
// time, in order: the first does not help (the verification keeps it or
// not: it does no worse than the fault), the second fixes the fault and
// is confirmed.
func TestFailuresMoveThroughCandidates(t *testing.T) {
	e := newEnv(t, si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{}),
		si.WithCandidates(si.Candidate{Name: "v2", Params: map[string]string{"prompt": "v2"}}, si.Candidate{Name: "v3", Params: map[string]string{"prompt": "v3"}}))
	r := rand.New(rand.NewPCG(1, 32))
	var applied []string
	done := 0
	for i := 0; i < 20_000 && done == 0; i++ {
		e.clk.Advance(10 * time.Second)
		rep, _ := e.l.ExecuteWithImprovement(context.Background(), "bot", func(_ context.Context, cfg si.Config) error {
			e.clk.Advance(100 * time.Millisecond)
			fails := 0.02
			if i >= 1000 && cfg.Params["prompt"] != "v3" {
				fails = 0.5 // the provider's new validation rejects the older prompts
			}
			if r.Float64() < fails {
				return classed{failure.ClassBadRequest}
			}
			return nil
		})
		if c := rep.Improvement; c != nil {
			applied = append(applied, c.To.Params["prompt"])
			if !strings.Contains(c.Reason, "no safe move left for bad_request: candidate") {
				t.Errorf("applied %q: %s", c.To.Params["prompt"], c.Reason)
			}
		}
		if c := rep.Confirmed; c != nil && c.To.Params["prompt"] == "v3" {
			done = i
		}
	}
	if !slices.Equal(applied, []string{"v2", "v3"}) || done == 0 || e.l.Config("bot").Params["prompt"] != "v3" {
		t.Errorf("applied %q, v3 confirmed at call %d, prompt now %q; want v2 then v3, confirmed", applied, done, e.l.Config("bot").Params["prompt"])
	}
	t.Logf("v3 confirmed at call %d, %d calls after the fault began", done, done-1000)
}

// TestExplorationNotUnderProposeOnly: an agent put in propose-only mode
// on its own (Loop.SetProposeOnly) is not explored, as under a loop-wide
// RollbackPolicy.ProposeOnly: its config never changes.
func TestExplorationNotUnderProposeOnly(t *testing.T) {
	w := newCandWorld(t, 1, 1, si.WithExploration(si.Exploration{Share: 0.5}),
		si.WithCandidates(si.Candidate{Name: "cheap", Route: "small"}))
	w.cost = func(c si.Config) float64 { return map[string]float64{"": 1, "small": 0.5}[c.Route] }
	w.call() // the agent exists
	if err := w.e.l.SetProposeOnly("bot", true); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if rep := w.call(); rep.Improvement != nil || w.e.l.Config("bot").Route != "" {
			t.Fatalf("call %d applied %+v under propose-only", i, rep.Improvement)
		}
	}
	if ps := w.e.l.Proposals(nil); len(ps) != 0 {
		t.Fatalf("%d proposals filed under propose-only, the first %q: want none (nothing explored)", len(ps), ps[0].Rationale)
	}
	if err := w.e.l.SetProposeOnly("bot", false); err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		if w.call(); w.e.l.Config("bot").Route == "small" {
			return
		}
	}
	t.Fatal("not explored once out of propose-only mode")
}
