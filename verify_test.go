package selfimprove_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// outcomes builds the stats of a scripted sequence: 'F' a failure, any
// other byte a success, each call taking d.
func outcomes(seq string, d time.Duration) si.Stats {
	var s si.Stats
	for i := range len(seq) {
		s.Calls++
		s.TotalLatency += d
		if seq[i] == 'F' {
			s.Failures++
			s.ConsecutiveFailures++
		} else {
			s.ConsecutiveFailures = 0
		}
	}
	return s
}

// firstDecision feeds the calls of seq to p one by one, as the loop does,
// and returns the first decision and after how many calls it came (0 when
// it never came).
func firstDecision(p si.RollbackPolicy, e si.Evidence, seq string, d time.Duration) (si.Verdict, int) {
	for n := 1; n <= len(seq); n++ {
		e.After = outcomes(seq[:n], d)
		if v := p.Decide(e); v.Decision != si.DecisionWait {
			return v, n
		}
	}
	return si.Verdict{}, 0
}

func TestDecideSeedCompatibleMatchesFixedRule(t *testing.T) {
	// Every boundary case of the fixed rule decides the same through
	// Decide under SeedCompatible as through Judge.
	ms := time.Millisecond
	cases := [][2]si.Stats{
		{st(100, 10, 10*ms, 0), st(9, 0, 10*ms, 0)},
		{st(100, 10, 10*ms, 0), st(10, 2, 10*ms, 0)},
		{st(100, 10, 10*ms, 0), st(10, 3, 10*ms, 0)},
		{st(10, 2, 10*ms, 0), st(10, 3, 10*ms, 0)},
		{st(100, 0, 10*ms, 0), st(10, 0, 12*ms, 0)},
		{st(100, 0, 10*ms, 0), si.Stats{Calls: 10, TotalLatency: 120*ms + 1}},
		{st(100, 0, 2*ms, 0), st(10, 0, 3*ms, 0)},
		{st(100, 10, 10*ms, 0), st(5, 5, 10*ms, 5)},
	}
	for _, m := range []si.Method{si.MethodFixed, si.MethodSequential, si.MethodCanary} {
		p := si.RollbackPolicy{SeedCompatible: true, Method: m}
		for _, c := range cases {
			if got, want := p.Decide(si.Evidence{Before: c[0], After: c[1]}), p.Judge(c[0], c[1]); got != want {
				t.Errorf("%v: Decide = %v, Judge = %v for %+v → %+v", m, got, want, c[0], c[1])
			}
		}
	}
}

func TestLatencyRiseWithSuccessRise(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name          string
		before, after si.Stats
		want, seed    si.Decision
	}{
		{"failures became slower successes", st(10, 10, 150*ms, 0), st(10, 0, 200*ms, 0), si.DecisionConfirm, si.DecisionRollback},
		{"success +40 points, latency doubled", st(10, 5, 100*ms, 0), st(10, 1, 200*ms, 0), si.DecisionConfirm, si.DecisionRollback},
		// Success rose, not yet significantly: more calls decide.
		{"success +10 points, latency doubled: verified on", st(10, 2, 100*ms, 0), st(10, 1, 200*ms, 0), si.DecisionWait, si.DecisionRollback},
		{"success +20 points, latency within 20%", st(10, 3, 100*ms, 0), st(10, 1, 110*ms, 0), si.DecisionConfirm, si.DecisionConfirm},
		{"same success, latency doubled", st(10, 1, 100*ms, 0), st(10, 1, 200*ms, 0), si.DecisionRollback, si.DecisionRollback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (si.RollbackPolicy{}).Judge(tt.before, tt.after); got.Decision != tt.want {
				t.Errorf("default: %v (%s), want %v", got.Decision, got.Reason, tt.want)
			}
			if got := (si.RollbackPolicy{SeedCompatible: true}).Judge(tt.before, tt.after); got.Decision != tt.seed {
				t.Errorf("seed: %v (%s), want %v", got.Decision, got.Reason, tt.seed)
			}
		})
	}
}

func TestDecideSequential(t *testing.T) {
	ms := time.Millisecond
	// Reference: 9 of the last 10 calls and 180 of 200 in the window
	// succeeded; they agree, so p0 is the window's (180.5/201 = 0.898), H1
	// p1 = 0.698. A failure adds ln(0.302/0.102) = 1.085 to the
	// log-likelihood ratio, a success ln(0.698/0.898) = -0.252; the policy
	// rolls back at ln(0.98/0.004) = 5.50 and confirms at ln(0.02/0.996) =
	// -3.91 after at least 10 calls.
	e := si.Evidence{Before: st(10, 1, 100*ms, 0), Window: st(200, 20, 100*ms, 0)}
	seq := si.RollbackPolicy{Method: si.MethodSequential, MaxConsecutiveFailures: -1}
	tests := []struct {
		name  string
		p     si.RollbackPolicy
		calls string
		want  si.Decision
		at    int
	}{
		// 16 successes: -4.03 ≤ -3.91 at the 16th call.
		{"all succeed: confirm at 16", seq, strings.Repeat("s", 20), si.DecisionConfirm, 16},
		// The test would need 6 failures (6.51); the early rule for
		// clearly harmful changes decides on the 4th: 4 failures in 4
		// calls have a chance of 0.014 % at the 90 % reference, under its
		// 0.08 % (FalseRollbacks/5).
		{"broken change: 4 failures", seq, "FFFFFFFF", si.DecisionRollback, 4},
		// 5 failures in 7 calls (0.028 %), on the 7th: the early rule
		// again; 3 in 4 (0.44 %) and 4 in 6 (0.17 %) were not enough.
		{"failures: roll back at the 5th after a success", seq, "sFFFsFF", si.DecisionRollback, 7},
		// The consecutive-failure rule still applies by default: 5
		// failures in 11 calls have a chance of 0.4 % at the reference,
		// too much for the early rule, and the test is at 3.9.
		{"5 in a row with the default rule", si.RollbackPolicy{Method: si.MethodSequential}, "ssssssFFFFF", si.DecisionRollback, 11},
		// A failure every 4th call is 25 %: the LLR rises 0.329 every 4
		// calls and passes 5.50 after 17 such blocks; the backstop decides
		// first, at 60 calls: 15 failures have a chance of 0.35 % at the
		// reference (the beta-binomial tail), under 1 %.
		{"harmful 75%: the backstop rolls back at 60", seq, strings.Repeat("sssF", 25), si.DecisionRollback, 60},
		{"harmful 75%: without the backstop, the test at 68", si.RollbackPolicy{Method: si.MethodSequential, MaxConsecutiveFailures: -1, BackstopCalls: -1},
			strings.Repeat("sssF", 25), si.DecisionRollback, 68},
		// Undecided at MaxCalls: confirmed.
		{"undecided at the cap", si.RollbackPolicy{Method: si.MethodSequential, MaxCalls: 20, MaxConsecutiveFailures: -1},
			strings.Repeat("ssssF", 4), si.DecisionConfirm, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, at := firstDecision(tt.p, e, tt.calls, 100*ms)
			if v.Decision != tt.want || at != tt.at {
				t.Errorf("decision %v at call %d, want %v at %d (%s)", v.Decision, at, tt.want, tt.at, v.Reason)
			}
		})
	}
	// Confirmation still passes the latency rule: success rose from 90 %
	// to 100 %, not yet significantly after 12 calls (verified on), then
	// significantly after 50, when only a rise of the latency of successes
	// beyond 400 % rolls back.
	e.After = outcomes(strings.Repeat("s", 12), 300*ms)
	if v := seq.Decide(e); v.Decision != si.DecisionWait {
		t.Errorf("slow change after 12 calls: %v (%s), want wait", v.Decision, v.Reason)
	}
	e.After = outcomes(strings.Repeat("s", 50), 500*ms)
	if v := seq.Decide(e); v.Decision != si.DecisionConfirm || !strings.Contains(v.Reason, "kept because success rose") {
		t.Errorf("slow change after 50 calls, +400%%: %v (%s), want confirm", v.Decision, v.Reason)
	}
	e.After = outcomes(strings.Repeat("s", 50), 501*ms)
	if v := seq.Decide(e); v.Decision != si.DecisionRollback || !strings.Contains(v.Reason, "latency") {
		t.Errorf("slow change after 50 calls, +401%%: %v (%s), want a latency rollback", v.Decision, v.Reason)
	}
}

func TestDecideCanary(t *testing.T) {
	ms := time.Millisecond
	p := si.RollbackPolicy{Method: si.MethodCanary}
	tests := []struct {
		name           string
		p              si.RollbackPolicy
		after, control si.Stats
		streak         si.Stats // control calls during the change's run of failures
		want           si.Decision
	}{
		{"control arm too short", p, st(100, 50, 10*ms, 0), st(9, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// 90% vs 60% over 10 calls each: 30 points, but z = 1.5: wait for
		// more. And against the reference before the change, 4 failures
		// in 10 calls have a chance of 1.6 %, over the early rule's 0.5 %.
		{"gap not yet wide enough", p, st(10, 4, 10*ms, 0), st(10, 1, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// The early rule: 5 failures in 10 have a chance of 0.24 % there.
		{"clearly harmful against the reference before", p, st(10, 5, 10*ms, 0), st(1, 0, 10*ms, 0), si.Stats{}, si.DecisionRollback},
		// Not when the previous config's calls fail more than that
		// reference explains: the conditions changed, the arms decide.
		{"clearly harmful, but control failing too", p, st(10, 5, 10*ms, 0), st(3, 3, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// Nor on a run of failures during which the previous config did not
		// succeed (here: did not run): 6 failures in a row of 10 calls are
		// left out, and 4 calls without a failure remain.
		{"clearly harmful, but a run no control call shared", p, st(10, 6, 10*ms, 6), st(1, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		{"change far worse than control", p, st(90, 45, 10*ms, 0), st(10, 0, 10*ms, 0), si.Stats{}, si.DecisionRollback},
		// An upstream outage hits both arms alike: not the change's fault.
		{"both arms down alike", p, st(180, 90, 10*ms, 0), st(20, 10, 10*ms, 0), si.Stats{}, si.DecisionConfirm},
		{"both arms fine: confirm at CanaryCalls", p, st(180, 0, 10*ms, 0), st(20, 0, 10*ms, 0), si.Stats{}, si.DecisionConfirm},
		{"both arms fine: wait below CanaryCalls", p, st(180, 0, 10*ms, 0), st(19, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		{"slower than control", p, st(180, 0, 20*ms, 0), st(20, 0, 10*ms, 0), si.Stats{}, si.DecisionRollback},
		// Consecutive failures are the change's only if the previous
		// config succeeded while they happened.
		{"5 consecutive failures, control succeeded meanwhile", p, st(7, 5, 10*ms, 5), st(2, 1, 10*ms, 0), st(1, 0, 10*ms, 0), si.DecisionRollback},
		{"4 consecutive failures, control succeeded meanwhile", p, st(9, 4, 10*ms, 4), st(2, 1, 10*ms, 0), st(1, 0, 10*ms, 0), si.DecisionWait},
		{"5 consecutive failures, control succeeded before them only", p, st(7, 5, 10*ms, 5), st(1, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		{"20 consecutive failures, control failing too", p, st(22, 20, 10*ms, 20), st(3, 2, 10*ms, 2), st(2, 2, 10*ms, 2), si.DecisionWait},
		{"20 consecutive failures, no control call meanwhile", p, st(22, 20, 10*ms, 20), st(1, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// The backstop, on the 60th call of both arms, against the
		// reference before the change (90 %, 200 calls). A 20-point loss
		// (16 of 54 fail) is not "clearly harmful" (more than 20 points):
		// the early rule leaves it to the backstop.
		{"backstop: 30-point loss, control fine", p, st(54, 21, 10*ms, 0), st(6, 0, 10*ms, 0), si.Stats{}, si.DecisionRollback},
		{"backstop: 20-point loss, control fine", p, st(54, 16, 10*ms, 0), st(6, 0, 10*ms, 0), si.Stats{}, si.DecisionRollback},
		{"backstop: one call earlier, wait", p, st(53, 16, 10*ms, 0), st(6, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		{"backstop: harmless", p, st(54, 6, 10*ms, 0), st(6, 1, 10*ms, 0), si.Stats{}, si.DecisionWait},
		{"backstop: off", si.RollbackPolicy{Method: si.MethodCanary, BackstopCalls: -1}, st(54, 16, 10*ms, 0), st(6, 0, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// The previous config failed as often: conditions changed, the
		// arms decide.
		{"backstop: control failing alike", p, st(54, 21, 10*ms, 0), st(6, 4, 10*ms, 0), si.Stats{}, si.DecisionWait},
		// A run of the change's failures while every call of the previous
		// config failed too is left out: 21-15 = 6 failures in 39 calls.
		{"backstop: the failures of an outage on both arms left out", p, st(54, 21, 10*ms, 15), st(6, 2, 10*ms, 2), st(2, 2, 10*ms, 2), si.DecisionWait},
		{"backstop: the same run, control succeeded meanwhile", p, st(54, 21, 10*ms, 15), st(6, 2, 10*ms, 2), st(2, 1, 10*ms, 1), si.DecisionRollback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Before and Window count only in the backstop: a bad week
			// does not matter to the comparison of the arms.
			e := si.Evidence{Before: st(16, 2, ms, 0), Window: st(200, 20, ms, 0), After: tt.after, Control: tt.control, StreakControl: tt.streak}
			if got := tt.p.Decide(e); got.Decision != tt.want {
				t.Errorf("%v (%s), want %v", got.Decision, got.Reason, tt.want)
			}
		})
	}
}

// A change applied during a run of failures (an outage) that has failed
// every one of its calls has not ended the run it was made for: under
// MethodCanary too, MaxConsecutiveFailures of them roll it back, though
// the previous config fails alike. A run that begins after the change
// succeeded is a fault of both arms, not the change's.
func TestDecideCanaryTheRunItWasMadeIn(t *testing.T) {
	ms := time.Millisecond
	p := si.RollbackPolicy{Method: si.MethodCanary}
	tests := []struct {
		name                   string
		window, after, control si.Stats
		want                   si.Decision
	}{
		{"made in a run of 17, 5 failures, control failing too", st(218, 20, ms, 17), st(5, 5, ms, 5), st(1, 1, ms, 1), si.DecisionRollback},
		{"made in a run of 17, 5 failures, no control call", st(218, 20, ms, 17), st(5, 5, ms, 5), si.Stats{}, si.DecisionRollback},
		{"made in a run of 17, 4 failures", st(218, 20, ms, 17), st(4, 4, ms, 4), st(1, 1, ms, 1), si.DecisionWait},
		{"made in a run of 17, succeeded before its run", st(218, 20, ms, 17), st(30, 20, ms, 20), st(3, 3, ms, 3), si.DecisionWait},
		{"made after 3 failures in a row", st(218, 20, ms, 3), st(20, 20, ms, 20), st(2, 2, ms, 2), si.DecisionWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := si.Evidence{Before: st(16, 16, ms, 0), Window: tt.window, After: tt.after, Control: tt.control, StreakControl: tt.control}
			if got := p.Decide(e); got.Decision != tt.want {
				t.Errorf("%v (%s), want %v", got.Decision, got.Reason, tt.want)
			}
		})
	}
}

// canaryRun applies a change under MethodCanary with seed and makes n
// calls; the change's route "b" and the previous config fail as told. It
// returns the arm and version of each call and the last report.
func canaryRun(t *testing.T, seed uint64, n int, changeFails, controlFails bool) ([]si.Arm, []int, *env) {
	t.Helper()
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{
		Method: si.MethodCanary, CanarySeed: seed, CanaryCalls: 1000, MaxConsecutiveFailures: -1, MinBeforeCalls: -1}))
	applyTweak(t, e, "a")
	var arms []si.Arm
	var versions []int
	for range n {
		rep, _ := e.l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
			e.clk.Advance(time.Millisecond)
			if (c.Route == "b" && changeFails) || (c.Route != "b" && controlFails) {
				return errBoom
			}
			return nil
		})
		arms = append(arms, rep.Arm)
		versions = append(versions, rep.ConfigVersion)
		if rep.Rollback != nil || rep.Confirmed != nil {
			break
		}
	}
	return arms, versions, e
}

func TestCanaryArms(t *testing.T) {
	arms, versions, e := canaryRun(t, 7, 400, false, false)
	control := 0
	for i, a := range arms {
		want := 2
		if a == si.ArmControl {
			control++
			want = 1
		} else if a != si.ArmChange {
			t.Fatalf("call %d: arm %v during canary verification", i, a)
		}
		if versions[i] != want {
			t.Fatalf("call %d in arm %v ran version %d, want %d", i, a, versions[i], want)
		}
	}
	if control < 20 || control > 60 {
		t.Errorf("%d of 400 calls ran the previous config, want about 40", control)
	}
	// Credit goes to each arm's version.
	chs := e.l.Changes("a")
	v := chs[len(chs)-1]
	if v.State != si.ChangeVerifying || v.Control == nil || v.Control.Calls != control || v.After.Calls != 400-control {
		t.Fatalf("change under verification = %+v, want %d control calls and %d under the change", v, control, 400-control)
	}
	// The same seed gives the same arms; another seed others.
	again, _, _ := canaryRun(t, 7, 400, false, false)
	if !slices.Equal(arms, again) {
		t.Error("the same seed gave different arms")
	}
	other, _, _ := canaryRun(t, 8, 400, false, false)
	if slices.Equal(arms, other) {
		t.Error("seeds 7 and 8 gave the same arms")
	}
}

func TestCanaryDecisions(t *testing.T) {
	t.Run("change worse than control is rolled back", func(t *testing.T) {
		arms, _, e := canaryRun(t, 1, 1000, true, false)
		chs := e.l.Changes("a")
		last := chs[len(chs)-1]
		if last.State != si.ChangeRolledBack || last.Control == nil || last.Control.Failures != 0 || last.After.Failures != last.After.Calls {
			t.Fatalf("after %d calls: %+v", len(arms), last)
		}
		if got := e.l.Config("a"); got.Route != "" {
			t.Errorf("config after rollback = %+v", got)
		}
		// Verification over, calls run the restored config, in no arm.
		if rep := e.call("a", nil, time.Millisecond); rep.Arm != si.ArmNone || rep.ConfigVersion != 1 {
			t.Errorf("after the decision: arm %v, version %d", rep.Arm, rep.ConfigVersion)
		}
	})
	t.Run("outage on both arms is not blamed on the change", func(t *testing.T) {
		strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
		e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{Method: si.MethodCanary, MaxConsecutiveFailures: -1, MinBeforeCalls: -1}))
		applyTweak(t, e, "a")
		var last si.Report
		for i := 0; last.Confirmed == nil && last.Rollback == nil; i++ {
			if i > 2000 {
				t.Fatal("no decision")
			}
			var err error
			if i%2 == 0 {
				err = errBoom // the upstream fails every other call, whatever the config
			}
			rep, _ := e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
				e.clk.Advance(time.Millisecond)
				return err
			})
			last = rep
		}
		if last.Confirmed == nil || last.Confirmed.Control == nil || last.Confirmed.Control.Calls < 20 {
			t.Fatalf("decision: rollback %+v confirmed %+v", last.Rollback, last.Confirmed)
		}
		if rep := e.call("a", nil, time.Millisecond); rep.Arm != si.ArmNone || rep.ConfigVersion != 2 {
			t.Errorf("after confirmation: arm %v, version %d", rep.Arm, rep.ConfigVersion)
		}
	})
	t.Run("canary survives a restart", func(t *testing.T) {
		strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
		pol := si.WithRollbackPolicy(si.RollbackPolicy{Method: si.MethodCanary, CanaryFraction: 0.5, MinBeforeCalls: -1})
		e := newEnv(t, si.WithStrategy(strat), pol)
		applyTweak(t, e, "a")
		e.calls("a", 20, nil, time.Millisecond)
		before := e.l.Changes("a")
		e.l.Close()
		e.open(pol)
		after := e.l.Changes("a")
		if len(after) == 0 || after[len(after)-1].Control == nil || *after[len(after)-1].Control != *before[len(before)-1].Control {
			t.Fatalf("control counts lost across a restart: %+v → %+v", before[len(before)-1].Control, after)
		}
		seen := map[si.Arm]bool{}
		for range 20 {
			seen[e.call("a", nil, time.Millisecond).Arm] = true
		}
		if !seen[si.ArmControl] || !seen[si.ArmChange] {
			t.Errorf("arms after a restart: %v", seen)
		}
	})
}

func TestRegimeShiftKeepsTheFix(t *testing.T) {
	// The upstream answered in 100ms under a 150ms timeout; it slows to
	// 200ms, calls time out, and the change raises the timeout to 300ms.
	for _, tt := range []struct {
		p    si.RollbackPolicy
		kept bool
	}{
		{si.RollbackPolicy{}, true},
		{si.RollbackPolicy{Method: si.MethodSequential}, true},
		{si.RollbackPolicy{Method: si.MethodCanary}, true},
		{si.RollbackPolicy{Method: si.MethodFixed}, true},
		{si.RollbackPolicy{SeedCompatible: true}, false},
	} {
		t.Run(tt.p.Method.String()+map[bool]string{true: "/seed"}[tt.p.SeedCompatible], func(t *testing.T) {
			strat := &tweakStrategy{tweaks: []si.Config{{Timeout: 300 * time.Millisecond}}}
			e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(tt.p), si.WithDefaultConfig(si.Config{Timeout: 150 * time.Millisecond}))
			if err := e.l.SetThreshold("a", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Hour}); err != nil {
				t.Fatal(err)
			}
			latency := 100 * time.Millisecond
			call := func() si.Report {
				rep, _ := e.l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
					if latency > c.Timeout {
						e.clk.Advance(c.Timeout)
						return context.DeadlineExceeded
					}
					e.clk.Advance(latency)
					return nil
				})
				e.clk.Advance(time.Second)
				return rep
			}
			for range 50 {
				call()
			}
			latency = 200 * time.Millisecond
			var ch *si.Change
			for i := 0; ch == nil; i++ {
				if i > 1000 {
					t.Fatal("no decision")
				}
				rep := call()
				if imp := rep.Improvement; imp != nil && !tt.p.SeedCompatible && (imp.Before.Calls != 3 || imp.Before.Failures != 3) {
					t.Errorf("before = %+v, want the 3 timeouts since the fault began", imp.Before)
				}
				ch = cmpOr(rep.Confirmed, rep.Rollback)
			}
			if kept := ch.State == si.ChangeConfirmed; kept != tt.kept {
				t.Errorf("fix kept = %v, want %v: %s", kept, tt.kept, ch.Verdict)
			}
		})
	}
}

func cmpOr(a, b *si.Change) *si.Change {
	if a != nil {
		return a
	}
	return b
}

var _ = errors.Is

func TestCanaryControlCallsDoNotTriggerTheNewConfig(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{Method: si.MethodCanary, CanaryFraction: 0.5, MaxConsecutiveFailures: -1, MinBeforeCalls: -1}))
	applyTweak(t, e, "a")
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Second}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(13 * time.Hour) // past the cooldown set when the change was applied
	// The previous config fails, the change succeeds, until confirmed.
	var controlFailures int
	for i := 0; ; i++ {
		if i > 500 {
			t.Fatal("no decision")
		}
		rep, _ := e.l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
			e.clk.Advance(time.Millisecond)
			if c.Route != "b" {
				return errBoom
			}
			return nil
		})
		if rep.Arm == si.ArmControl {
			controlFailures++
		}
		if rep.Rollback != nil {
			t.Fatalf("rolled back: %s", rep.Rollback.Verdict)
		}
		if rep.Confirmed != nil {
			break
		}
	}
	if controlFailures < 10 {
		t.Fatalf("%d control failures", controlFailures)
	}
	// The control arm's failures ran the previous config: one failure of
	// the new config does not reach the threshold of 2, a second does.
	if rep := e.call("a", errBoom, time.Millisecond); rep.ImprovementTriggered {
		t.Error("the previous config's failures counted toward the new config's trigger")
	}
	if rep := e.call("a", errBoom, time.Millisecond); !rep.ImprovementTriggered {
		t.Error("two failures of the new config did not trigger")
	}
}
