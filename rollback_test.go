package selfimprove_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
)

// st builds stats from calls, failures, average latency and consecutive
// failures.
func st(calls, failures int, avg time.Duration, consec int) si.Stats {
	return si.Stats{Calls: calls, Failures: failures, TotalLatency: avg * time.Duration(calls), ConsecutiveFailures: consec}
}

func TestJudgeDefaultPolicy(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name          string
		before, after si.Stats
		want          si.Decision
	}{
		// Verification length: 9 calls wait, 10 decide.
		{"9 calls wait", st(100, 10, 10*ms, 0), st(9, 0, 10*ms, 0), si.DecisionWait},
		{"10 calls confirm", st(100, 10, 10*ms, 0), st(10, 0, 10*ms, 0), si.DecisionConfirm},
		// Consecutive failures: 4 wait, 5 roll back at once.
		{"4 consecutive wait", st(100, 10, 10*ms, 0), st(4, 4, 10*ms, 4), si.DecisionWait},
		{"5 consecutive roll back before 10 calls", st(100, 10, 10*ms, 0), st(5, 5, 10*ms, 5), si.DecisionRollback},
		{"5 consecutive after a success", st(100, 10, 10*ms, 0), st(7, 5, 10*ms, 5), si.DecisionRollback},
		// Success rate: exactly 10 points waits for the next call, more
		// rolls back, less confirms.
		{"drop exactly 10 points (90→80)", st(100, 10, 10*ms, 0), st(10, 2, 10*ms, 0), si.DecisionWait},
		{"drop 20 points (90→70)", st(100, 10, 10*ms, 0), st(10, 3, 10*ms, 0), si.DecisionRollback},
		{"float trap 0.8-0.7", st(10, 2, 10*ms, 0), st(10, 3, 10*ms, 0), si.DecisionWait},
		{"float trap 0.3-0.2", st(10, 7, 10*ms, 0), st(10, 8, 10*ms, 0), si.DecisionWait},
		{"drop 9.1 points after one more success", st(100, 10, 10*ms, 0), st(11, 2, 10*ms, 0), si.DecisionConfirm},
		{"drop just over 10 points", st(1000, 100, 10*ms, 0), st(1000, 201, 10*ms, 0), si.DecisionRollback},
		{"improvement confirms", st(100, 50, 10*ms, 0), st(10, 0, 10*ms, 0), si.DecisionConfirm},
		// Latency: exactly +20 % is kept, more rolls back, if the rise is at least 1ms.
		{"latency exactly +20%", st(100, 0, 10*ms, 0), st(10, 0, 12*ms, 0), si.DecisionConfirm},
		{"latency +20% and 1ns", st(100, 0, 10*ms, 0), si.Stats{Calls: 10, TotalLatency: 120*ms + 1}, si.DecisionRollback},
		{"latency exactly +20% (30ms→36ms)", st(10, 0, 30*ms, 0), st(10, 0, 36*ms, 0), si.DecisionConfirm},
		{"latency +100% under the 1ms floor", st(100, 0, 100*time.Microsecond, 0), st(10, 0, 200*time.Microsecond, 0), si.DecisionConfirm},
		{"latency +50% exactly at the 1ms floor", st(100, 0, 2*ms, 0), st(10, 0, 3*ms, 0), si.DecisionRollback},
		{"latency +30% over the floor", st(100, 0, 5*ms, 0), st(10, 0, 6500*time.Microsecond, 0), si.DecisionRollback},
		{"no calls before: confirm", si.Stats{}, st(10, 1, 10*ms, 0), si.DecisionConfirm},
		{"zero latency before, rise under floor", st(10, 0, 0, 0), st(10, 0, 500*time.Microsecond, 0), si.DecisionConfirm},
		{"zero latency before, rise over floor", st(10, 0, 0, 0), st(10, 0, 2*ms, 0), si.DecisionRollback},
	}
	var p si.RollbackPolicy
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Judge(tt.before, tt.after)
			if diff := cmp.Diff(tt.want, got.Decision); diff != "" {
				t.Errorf("Judge(%+v, %+v) decision (-want +got):\n%s\nreason: %s", tt.before, tt.after, diff, got.Reason)
			}
			if got.Decision != si.DecisionWait && got.Reason == "" {
				t.Errorf("decision %v without a reason", got.Decision)
			}
		})
	}
}

func TestJudgeCustomPolicy(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name          string
		p             si.RollbackPolicy
		before, after si.Stats
		want          si.Decision
	}{
		{"MinCalls 3", si.RollbackPolicy{MinCalls: 3}, st(10, 0, ms, 0), st(3, 0, ms, 0), si.DecisionConfirm},
		{"success rule off", si.RollbackPolicy{MaxSuccessDrop: -1}, st(10, 0, ms, 0), st(10, 4, ms, 0), si.DecisionConfirm},
		{"latency rule off", si.RollbackPolicy{MaxLatencyRise: -1}, st(10, 0, ms, 0), st(10, 0, 10*ms, 0), si.DecisionConfirm},
		{"consecutive rule off", si.RollbackPolicy{MaxConsecutiveFailures: -1}, st(10, 0, ms, 0), st(9, 9, ms, 9), si.DecisionWait},
		{"floor 0 via 1ns", si.RollbackPolicy{MinLatencyRise: 1}, st(10, 0, 100, 0), st(10, 0, 200, 0), si.DecisionRollback},
		{"drop of exactly 5 points: the next call decides", si.RollbackPolicy{MaxSuccessDrop: 5}, st(20, 0, ms, 0), st(20, 1, ms, 0), si.DecisionWait},
		{"drop of exactly 5 points at MaxCalls: kept", si.RollbackPolicy{MaxSuccessDrop: 5, MaxCalls: 20}, st(20, 0, ms, 0), st(20, 1, ms, 0), si.DecisionConfirm},
		{"drop 4.8 points after one more success", si.RollbackPolicy{MaxSuccessDrop: 5}, st(20, 0, ms, 0), st(21, 1, ms, 0), si.DecisionConfirm},
		{"drop 5 points exceeded", si.RollbackPolicy{MaxSuccessDrop: 5}, st(20, 0, ms, 0), st(20, 2, ms, 0), si.DecisionRollback},
		// 2 in a row are 1 in 500 at the reference's 4.5 % (0.5 of 11):
		// 3 are needed to be less likely than 1 in 1,000.
		{"consecutive 2 at a low failure rate: 3 needed", si.RollbackPolicy{MaxConsecutiveFailures: 2}, st(10, 0, ms, 0), st(3, 3, ms, 3), si.DecisionRollback},
		{"consecutive 2 at a low failure rate: 2 wait", si.RollbackPolicy{MaxConsecutiveFailures: 2}, st(10, 0, ms, 0), st(2, 2, ms, 2), si.DecisionWait},
		{"consecutive 5 at a 35 % failure rate: 7 needed", si.RollbackPolicy{MaxConsecutiveFailures: 5, MinCalls: 100}, st(16, 5, ms, 0), st(6, 6, ms, 6), si.DecisionWait},
		{"consecutive 5 at a 35 % failure rate: 7 roll back", si.RollbackPolicy{MaxConsecutiveFailures: 5, MinCalls: 100}, st(16, 5, ms, 0), st(7, 7, ms, 7), si.DecisionRollback},
		{"consecutive 5 in an outage", si.RollbackPolicy{MaxConsecutiveFailures: 5}, st(10, 10, ms, 0), st(5, 5, ms, 5), si.DecisionRollback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Judge(tt.before, tt.after)
			if got.Decision != tt.want {
				t.Errorf("got %v (%s), want %v", got.Decision, got.Reason, tt.want)
			}
		})
	}
}

// A window that earlier harmful tweaks pulled down (45 of 200 calls
// failed, 77 %) agrees with a clean "before" (1 of 16, 94 %), and the
// sequential tests pool the two: against 77 %, a tweak that fails two
// calls in three is not clearly harmful for a while. The early rule also
// weighs "before" alone, and rolls it back on the 8th call (6 failures
// in 8 calls: 0.058 % there, under MethodSequential's 0.08 %), where the
// pooled reference alone waited for the 13th.
func TestClearlyHarmfulAgainstACleanBefore(t *testing.T) {
	ms := time.Millisecond
	e := si.Evidence{Before: st(16, 1, ms, 0), Window: st(200, 45, ms, 0)}
	p := si.RollbackPolicy{Method: si.MethodSequential, MaxConsecutiveFailures: -1}
	v, at := firstDecision(p, e, strings.Repeat("FFs", 20), ms)
	if v.Decision != si.DecisionRollback || at != 8 || !strings.Contains(v.Reason, "clearly harmful: success 25.0% against a reference of 91.2% (16 calls before)") {
		t.Errorf("%v at call %d (%s), want a rollback on the 8th call against the 16 calls before", v.Decision, at, v.Reason)
	}
}

// A tweak made for a cluster of failures that crossed the threshold (5 of
// the 10 calls before it failed, against 5 of the window's 115) is judged
// against that cluster: the sequential tests' reference is "before" shrunk
// toward the window (62 %), and a tweak at 33 % waited 30 calls or more
// for the likelihood ratio or a run of failures. A change that did worse
// than the calls it was made for by more than MaxSuccessDrop, and clearly
// worse than the window, fixed nothing and made things worse: the early
// rule rolls it back on its MinCalls-th call. A change as good as the
// cluster (a fault it did not fix) is left to the tests.
func TestClearlyHarmfulAfterTheCluster(t *testing.T) {
	ms := time.Millisecond
	e := si.Evidence{Before: st(10, 5, ms, 0), Window: st(115, 5, ms, 0)}
	for _, m := range []si.Method{si.MethodQuick, si.MethodSequential} {
		p := si.RollbackPolicy{Method: m}
		v, at := firstDecision(p, e, strings.Repeat("FFs", 30), ms)
		if v.Decision != si.DecisionRollback || at != 10 || !strings.Contains(v.Reason, "the change did worse than the 10 calls before it, at 50.0%") {
			t.Errorf("%v: %v at call %d (%s), want a rollback on the 10th call against the window", m, v.Decision, at, v.Reason)
		}
		v, at = firstDecision(p, e, strings.Repeat("Fs", 45), ms)
		if strings.Contains(v.Reason, "did worse than the") {
			t.Errorf("%v: a change as good as the cluster: %v at call %d (%s)", m, v.Decision, at, v.Reason)
		}
	}
}
