package selfimprove_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Scenarios of what a change changes (docs/decisions.md, "A change is
// judged on the calls it has in common with the config before it"): a
// raised timeout, more attempts or a longer backoff turn failures into
// successes that take longer by design; they are judged on success and
// on the latency of the calls the previous config served alike, not on
// the average of all successes.

// slowTail is an upstream of fast calls, 5–10 ms, of which from call
// fault on a share take 110–140 ms; an attempt that takes longer than
// the config's Timeout fails at the timeout. Under a Timeout above 100 ms
// every call takes slow times as long (1: the raise changes nothing but
// the bound).
func slowTail(fault int, share float64, slow float64) upstream {
	return func(rng *rand.Rand, _ string, i int, cfg si.Config) (time.Duration, error) {
		d := 5*time.Millisecond + time.Duration(rng.IntN(5000))*time.Microsecond
		if i >= fault && rng.Float64() < share {
			d = 110*time.Millisecond + time.Duration(rng.IntN(30))*time.Millisecond
		}
		if cfg.Timeout > 100*time.Millisecond {
			d = time.Duration(float64(d) * slow)
		}
		if cfg.Timeout > 0 && d > cfg.Timeout {
			return cfg.Timeout, context.DeadlineExceeded
		}
		return d, nil
	}
}

// agentNames returns n agent IDs.
func agentNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent-%02d", i)
	}
	return out
}

// raises returns the agents' changes that raised their timeout, and the
// verdict of one that was rolled back.
func raises(f *fleet) (all, rolledBack int, verdict string) {
	for _, a := range f.agents {
		for _, ch := range f.l.Changes(a) {
			if ch.To.Timeout > ch.From.Timeout {
				all++
				if ch.State == si.ChangeRolledBack {
					rolledBack++
					verdict = ch.Verdict
				}
			}
		}
	}
	return all, rolledBack, verdict
}

// A timeout raise that lets the slow calls succeed is kept: the average
// latency of all successes rises several-fold (the slow calls now count
// among them), but the calls that succeeded before are as fast as ever.
// 20 agents of 5–10 ms calls, 30 % of which take 110–140 ms from call 100
// on and time out at 100 ms; the built-in strategy raises the timeout to
// 150 ms.
func TestScenarioTimeoutRaiseJudgedOnTheCallsItShares(t *testing.T) {
	const fault, end = 100, 400
	up := slowTail(fault, 0.3, 1)
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			cfg := si.WithDefaultConfig(si.Config{Timeout: 100 * time.Millisecond})
			with := newFleet(t, true, agentNames(20), up, si.WithRollbackPolicy(p.p), cfg)
			without := newFleet(t, false, agentNames(20), up, si.WithRollbackPolicy(p.p), cfg)
			with.run(end, time.Minute)
			without.run(end, time.Minute)
			all, rolled, v := raises(with)
			w, wo := with.rate(fault+100, end), without.rate(fault+100, end)
			t.Logf("%d timeout raises, %d rolled back; success %.1f%% with the loop, %.1f%% without", all, rolled, 100*w, 100*wo)
			if all < 20 {
				t.Errorf("%d timeout raises for 20 agents", all)
			}
			if rolled > 0 {
				t.Errorf("%d of %d timeout raises rolled back, e.g.: %s", rolled, all, v)
			}
			if w < wo+0.2 {
				t.Errorf("success %.1f%% with the loop, %.1f%% without: want the raise to fix the timeouts", 100*w, 100*wo)
			}
		})
	}
}

// The control: a timeout raise under which every call is twice as slow,
// the calls that succeeded before included, is rolled back for latency;
// also when the raise to 1 s lets every call succeed (success rose 30
// points: the calls that gained do not excuse the slower common ones).
func TestScenarioTimeoutRaiseThatSlowsEveryCallIsRolledBack(t *testing.T) {
	const fault, end = 100, 600
	up := slowTail(fault, 0.3, 2)
	for _, to := range []time.Duration{0, time.Second} {
		for _, p := range policies {
			t.Run(fmt.Sprint(p.name, "/", to), func(t *testing.T) {
				opts := []si.Option{si.WithRollbackPolicy(p.p), si.WithDefaultConfig(si.Config{Timeout: 100 * time.Millisecond})}
				if to > 0 {
					opts = append(opts, si.WithStrategy(&tweakStrategy{tweaks: []si.Config{{Timeout: to}}}))
				}
				with := newFleet(t, true, []string{"a"}, up, opts...)
				with.run(end, time.Minute)
				all, rolled, v := raises(with)
				chs := with.l.Changes("a")
				if all == 0 {
					t.Fatalf("the timeout was never raised: %+v", chs)
				}
				ch := chs[0]
				t.Logf("%s %v → %v: %s", ch.State, ch.From.Timeout, ch.To.Timeout, ch.Verdict)
				if rolled != all || to > 0 && !strings.Contains(v, "latency") {
					t.Errorf("%d of %d raises that doubled every call's latency rolled back: %s %s", rolled, all, ch.State, ch.Verdict)
				}
			})
		}
	}
}

// policies are the four methods, each at its defaults.
var policies = []struct {
	name string
	p    si.RollbackPolicy
}{
	{"default", si.RollbackPolicy{}}, {"sequential", si.RollbackPolicy{Method: si.MethodSequential}},
	{"canary", si.RollbackPolicy{Method: si.MethodCanary}}, {"fixed", si.RollbackPolicy{Method: si.MethodFixed}},
}

// oneOffs is an upstream of fast calls, 5–10 ms, each attempt of which
// fails from call fault on with a 503 at rate share, independently: a
// retry fixes most failures, after its backoff.
func oneOffs(fault int, share float64, err error) upstream {
	return func(rng *rand.Rand, _ string, i int, _ si.Config) (time.Duration, error) {
		d := 5*time.Millisecond + time.Duration(rng.IntN(5000))*time.Microsecond
		if i >= fault && rng.Float64() < share {
			return d, err
		}
		return d, nil
	}
}

// More attempts are judged alike: the retried successes wait their
// backoff (200 ms here), many times the latency of a fast call, and that
// is the fix's cost; the calls that succeed on their first attempt are as
// fast as ever. 20 agents of 5–10 ms calls, each attempt of which fails
// from call 100 on at 30 % (503s, or 429s), independently.
func TestScenarioAttemptsRaiseJudgedOnTheCallsItShares(t *testing.T) {
	const fault, end = 100, 400
	for _, p := range policies {
		for _, fail := range []error{err503, err429} {
			up := oneOffs(fault, 0.3, fail)
			t.Run(fmt.Sprint(p.name, "/", fail), func(t *testing.T) {
				cfg := si.WithDefaultConfig(si.Config{Backoff: 200 * time.Millisecond})
				with := newFleet(t, true, agentNames(20), up, si.WithRollbackPolicy(p.p), cfg)
				without := newFleet(t, false, agentNames(20), up, si.WithRollbackPolicy(p.p), cfg)
				with.run(end, time.Minute)
				without.run(end, time.Minute)
				all, rolled, v := 0, 0, ""
				for _, a := range with.agents {
					for _, ch := range with.l.Changes(a) {
						all++
						if ch.State == si.ChangeRolledBack {
							rolled++
							v = ch.Verdict
						}
					}
				}
				w, wo := with.rate(fault+100, end), without.rate(fault+100, end)
				t.Logf("%d changes, %d rolled back; success %.1f%% with the loop, %.1f%% without", all, rolled, 100*w, 100*wo)
				if rolled > 0 {
					t.Errorf("%d of %d changes rolled back, e.g.: %s", rolled, all, v)
				}
				if w < wo+0.15 {
					t.Errorf("success %.1f%% with the loop, %.1f%% without: want retries to fix the failures", 100*w, 100*wo)
				}
			})
		}
	}
}

// The latency rule of a change that raised a bound, as a pure function:
// the successes it shares with the previous config decide, not the
// average of all successes.
func TestDecideJudgesARaiseByTheSuccessesItShares(t *testing.T) {
	ms := time.Millisecond
	before := si.Stats{Calls: 16, Failures: 5, TotalLatency: 11*8*ms + 5*100*ms, SuccessLatency: 11 * 8 * ms}
	after := si.Stats{Calls: 30, TotalLatency: 21*8*ms + 9*125*ms, SuccessLatency: 21*8*ms + 9*125*ms} // 43 ms a success
	for _, tt := range []struct {
		name       string
		raised     bool
		comparable si.Stats
		want       si.Decision
		says       string
	}{
		{"not a raise: all successes", false, si.Stats{}, si.DecisionRollback, "more than 400%"},
		{"a raise: the common successes as fast", true, si.Stats{Calls: 21, TotalLatency: 21 * 8 * ms}, si.DecisionConfirm, "would have served alike"},
		{"a raise: the common successes 30 % slower, with a gain", true, si.Stats{Calls: 21, TotalLatency: 21 * 10400 * time.Microsecond}, si.DecisionConfirm, "kept because success rose"},
		{"a raise: the common successes twice as slow", true, si.Stats{Calls: 21, TotalLatency: 21 * 16 * ms}, si.DecisionRollback, "more than a fix that raised the success rate 31.2 points may cost; the average latency of the 21 successes the previous config would have served alike rose 100.0%, more than 50%"},
		{"a raise: no common success yet", true, si.Stats{}, si.DecisionConfirm, ""},
	} {
		for _, p := range policies {
			if p.p.Method == si.MethodCanary {
				continue // judged against its control arm
			}
			e := si.Evidence{Before: before, Window: before, After: after, Raised: tt.raised, Comparable: tt.comparable}
			v := p.p.Decide(e)
			for n := after.Calls; v.Decision == si.DecisionWait && n < 200; n++ {
				e.After.Calls++
				e.After.TotalLatency += 43 * ms
				e.After.SuccessLatency += 43 * ms
				v = p.p.Decide(e)
			}
			if v.Decision != tt.want || !strings.Contains(v.Reason, tt.says) {
				t.Errorf("%s, %s: %s: %s", tt.name, p.name, v.Decision, v.Reason)
			}
		}
	}
}
