package selfimprove_test

import (
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestVerdictPlainFirst: each kind of verdict starts with one sentence a
// person reads, up to its first "; ", saying what happened to the calls,
// with the statistics after it (issue 43, item 6). The verdicts used to
// start with the statistics: "9 consecutive failures under the new
// config (limit 9)", "quick test: 6 failures in 20 calls…", "average
// latency 40ms (was 0s)".
func TestVerdictPlainFirst(t *testing.T) {
	ms := time.Millisecond
	before, window := st(16, 2, 20*ms, 0), st(200, 20, 20*ms, 0)
	scored := func(s si.Stats, n int, mean, sd float64) si.Stats {
		s.Scored, s.Quality, s.QualitySD = n, mean, sd
		return s
	}
	costed := func(s si.Stats, n int, cost float64) si.Stats {
		s.Costed, s.CostPerSuccess = n, cost
		return s
	}
	fixed := si.RollbackPolicy{Method: si.MethodFixed, BackstopCalls: -1}
	canary := si.RollbackPolicy{Method: si.MethodCanary}
	tests := []struct {
		name   string
		p      si.RollbackPolicy
		e      si.Evidence
		want   si.Decision
		plain  string
		figure string // a statistic the verdict keeps after the sentence
	}{
		{"consecutive failures", si.RollbackPolicy{}, si.Evidence{Before: before, Window: window, After: st(5, 5, 20*ms, 5)},
			si.DecisionRollback, "all 5 calls under the change failed, against 2 in 16 before", "5 consecutive failures (limit 5)"},
		{"consecutive failures after an outage", si.RollbackPolicy{}, si.Evidence{Before: st(3, 3, 50*ms, 3), Window: st(27, 15, 20*ms, 3), After: st(5, 5, 20*ms, 5)},
			si.DecisionRollback, "all 5 calls under the change failed, as did all 3 before: it fixed nothing", "5 consecutive failures (limit 5)"},
		{"likelihood ratio", si.RollbackPolicy{}, si.Evidence{Before: before, Window: window, After: st(20, 6, 20*ms, 1)},
			si.DecisionRollback, "6 of the 20 calls under the change failed, against 2 in 16 before", "the likelihood ratio for a fall to"},
		{"clearly harmful", si.RollbackPolicy{}, si.Evidence{Before: before, Window: window, After: st(6, 5, 20*ms, 1)},
			si.DecisionRollback, "5 of the 6 calls under the change failed, against 2 in 16 before", "clearly harmful: success 16.7%"},
		{"backstop", si.RollbackPolicy{}, si.Evidence{Before: before, Window: window, After: st(60, 14, 20*ms, 1)},
			si.DecisionRollback, "14 of the 60 calls under the change failed, against 2 in 16 before: too many to be chance", "backstop test at 60 calls"},
		{"no calls before", si.RollbackPolicy{}, si.Evidence{Window: window, After: st(6, 5, 20*ms, 1)},
			si.DecisionRollback, "5 of the 6 calls under the change failed, against 20 in 200 in the analysis window", "quick test: success 16.7%"},
		{"fixed rule", fixed, si.Evidence{Before: before, After: st(10, 5, 20*ms, 1)},
			si.DecisionRollback, "5 of the 10 calls under the change failed, against 2 in 16 before", "success rate fell 37.5 points (87.5% → 50.0%)"},
		{"fixed rule with the backstop", si.RollbackPolicy{Method: si.MethodFixed}, si.Evidence{Before: before, Window: window, After: st(10, 5, 20*ms, 1)},
			si.DecisionRollback, "5 of the 10 calls under the change failed, against 2 in 16 before", "success rate fell 37.5 points"},
		{"canary arms", canary, si.Evidence{Before: before, Window: window, After: st(20, 10, 20*ms, 1), Control: st(20, 1, 20*ms, 0)},
			si.DecisionRollback, "10 of the 20 calls under the change failed, against 1 in 20 under the previous config in the same period", "standard errors"},
		{"canary run it has not ended", canary, si.Evidence{Before: before, Window: st(200, 30, 20*ms, 6), After: st(5, 5, 20*ms, 5)},
			si.DecisionRollback, "all 5 calls under the change failed, after a run of 6 failures before it that it has not ended", "5 consecutive failures (limit 5)"},
		{"latency", si.RollbackPolicy{}, si.Evidence{Before: st(16, 0, 20*ms, 0), Window: st(100, 0, 20*ms, 0), After: st(20, 0, 50*ms, 0)},
			si.DecisionRollback, "successful calls under the change were slower: 50ms on average, against 20ms before", "average latency rose 150.0%, more than 20%"},
		{"confirmed", si.RollbackPolicy{}, si.Evidence{Before: st(16, 0, 20*ms, 0), Window: st(100, 0, 20*ms, 0), After: st(20, 0, 20*ms, 0)},
			si.DecisionConfirm, "all 20 calls under the change succeeded, against all 16 before", "average latency 20ms (was 20ms); quick test passed"},
		{"confirmed after no success", si.RollbackPolicy{}, si.Evidence{Before: st(15, 15, 50*ms, 15), Window: st(27, 15, 20*ms, 3), After: st(10, 0, 40*ms, 0)},
			si.DecisionConfirm, "all 10 calls under the change succeeded, against none of the 15 before", "average latency 40ms (no earlier figure)"},
		{"confirmed with nothing before", fixed, si.Evidence{After: st(10, 1, 20*ms, 0)},
			si.DecisionConfirm, "9 of the 10 calls under the change succeeded, with no calls before to compare with", ""},
		{"quality", fixed, si.Evidence{Before: scored(before, 40, 0.9, 0.05), After: scored(st(40, 0, 20*ms, 0), 40, 0.5, 0.05)},
			si.DecisionRollback, "answers under the change scored lower: 0.500 on average, against 0.900 before", "mean quality fell from 0.900 (40 scored calls) to 0.500 (40 scored calls)"},
		{"cost", fixed, si.Evidence{Before: costed(before, 40, 1), After: costed(st(20, 0, 20*ms, 0), 20, 5)},
			si.DecisionRollback, "each success under the change cost 400% more, with no better answers or fewer failures to show for it", "cost per successful call rose 400% (1 to 5"},
		{"explored, no gain", fixed, si.Evidence{Exploring: true, Before: costed(st(16, 0, 20*ms, 0), 40, 1), After: costed(st(20, 0, 20*ms, 0), 20, 1)},
			si.DecisionRollback, "the candidate explored under the change did no better than the config before it: no better answers, lower cost or fewer failures", "the explored candidate brought no gain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.p.Decide(tt.e)
			if v.Decision != tt.want {
				t.Fatalf("decision %v, want %v: %q", v.Decision, tt.want, v.Reason)
			}
			first, rest, _ := strings.Cut(v.Reason, "; ")
			if first != tt.plain {
				t.Errorf("first sentence %q, want %q (verdict %q)", first, tt.plain, v.Reason)
			}
			if !strings.Contains(rest, tt.figure) {
				t.Errorf("statistics %q, want them to contain %q", rest, tt.figure)
			}
			if strings.Contains(v.Reason, "was 0s") {
				t.Errorf("verdict %q compares with a latency never measured", v.Reason)
			}
		})
	}
}

// TestRouteReasonsPlainFirst: the reasons and verdicts the loop writes
// for its route moves start in plain words too (issue 43, item 6). The
// primary is withdrawn, the backup answers 503s for 5 minutes, serves
// for 5 more, then fails for good: the loop moves to the backup, and
// when the backup fails, moves on to the spare rather than back to the
// dead primary. They read "model_unavailable on route "primary": 1 calls in a
// row succeeded only on route "backup"", "rolled forward: route
// "primary" is dead (…)" and "5 consecutive failures under the new
// config (limit 5)".
func TestRouteReasonsPlainFirst(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk)
	start := clk.Now()
	callEvery(l, clk, "a", 24*60, time.Minute, func(route string) error {
		switch {
		case route == "" || route == "primary":
			return errGone
		case route == "backup" && clk.Now().Before(start.Add(5*time.Minute)):
			return err503
		case route == "backup" && clk.Now().Before(start.Add(10*time.Minute)):
			return nil
		case route == "backup":
			return err503
		}
		return nil
	})
	var got []string
	for _, ch := range l.Changes("a") {
		reason, _, _ := strings.Cut(ch.Reason, "; ")
		verdict, _, _ := strings.Cut(ch.Verdict, "; ")
		got = append(got, reason, verdict)
	}
	want := []string{
		`moved to route "backup", as route "primary" is marked dead (model_unavailable): the last call went to "backup" without asking it`,
		"the last 5 calls under v2 failed in a row, against 5 in 6 before",
		`moved on to route "spare", as rolling back would return to route "primary", which is dead`,
		"all 10 calls under v3 succeeded, against 5 in 15 before",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("first sentences\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
