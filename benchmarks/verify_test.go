package benchmarks

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// The verification simulation: deterministic seeds, a fake clock, no
// network. It runs
//
//	go test ./benchmarks -run TestVerificationSimulation -v
//	go test ./benchmarks -run '^$' -bench VerificationSimulation -benchtime 1x
//
// For each policy and base success rate, a change lands at a random moment
// of an agent that has run 200 calls at the base rate (its analysis window;
// no fault, so the recent regime is the last 16 calls). A harmless change
// leaves the rate as it was; a harmful one lowers it by 20 points, a
// moderately harmful one by 30; a clearly harmful one to 50 % or to 30 %.
// Calls take 80–120 ms whatever their outcome. The policy is asked after
// every call, as the loop asks it, until it decides.

// simPolicies are the policies compared.
var simPolicies = []struct {
	name string
	p    si.RollbackPolicy
}{
	{"seed", si.RollbackPolicy{SeedCompatible: true}},
	{"default", si.RollbackPolicy{}},
	{"sequential", si.RollbackPolicy{Method: si.MethodSequential}},
	{"canary", si.RollbackPolicy{Method: si.MethodCanary}},
	{"fixed", si.RollbackPolicy{Method: si.MethodFixed}},
}

// simBases are the base success rates.
var simBases = []float64{0.80, 0.90, 0.95}

// simResult is one policy's figures at one base rate.
type simResult struct {
	FalseRollbacks float64 // share of harmless changes rolled back
	Detected       float64 // share of 20-point losses rolled back
	Detected30     float64 // … within 30 calls
	Caught30In30   float64 // share of 30-point losses rolled back within 30 calls
	Kept30Over60   float64 // share of 30-point losses still in force after 60 calls
	MedianHarmless float64 // calls to a decision
	MedianHarmful  float64
	MedianTo50     float64 // clearly harmful: success falls to 50 %
	MedianTo30     float64 // … to 30 %
	// Within20 and Within30 are the shares of 20- and 30-point losses
	// rolled back within simLooks[i] calls.
	Within20, Within30 [len(simLooks)]float64
}

// simLooks are the call counts the detection-time distribution is read at;
// simLooks[look60] is 60.
var simLooks = [...]int{10, 20, 30, 45, 60, 100}

const look60 = 4

// simulate runs n changes of each kind.
func simulate(p si.RollbackPolicy, base float64, n int, seed uint64) simResult {
	rng := rand.New(rand.NewPCG(seed, uint64(base*1000)))
	var r simResult
	var harmless, harmful, to50, to30 []float64
	within := func(w *[len(simLooks)]float64, rb bool, calls int) {
		for i, k := range simLooks {
			if rb && calls <= k {
				w[i]++
			}
		}
	}
	for range n {
		rb, calls := simChange(rng, p, base, base)
		if rb {
			r.FalseRollbacks++
		}
		harmless = append(harmless, float64(calls))
		rb, calls = simChange(rng, p, base, base-0.2)
		if rb {
			r.Detected++
			if calls <= 30 {
				r.Detected30++
			}
		}
		within(&r.Within20, rb, calls)
		harmful = append(harmful, float64(calls))
		rb, calls = simChange(rng, p, base, base-0.3)
		if rb && calls <= 30 {
			r.Caught30In30++
		}
		if !rb || calls > 60 {
			r.Kept30Over60++
		}
		within(&r.Within30, rb, calls)
		_, calls = simChange(rng, p, base, 0.5)
		to50 = append(to50, float64(calls))
		_, calls = simChange(rng, p, base, 0.3)
		to30 = append(to30, float64(calls))
	}
	for _, f := range []*float64{&r.FalseRollbacks, &r.Detected, &r.Detected30, &r.Caught30In30, &r.Kept30Over60} {
		*f /= float64(n)
	}
	for i := range simLooks {
		r.Within20[i] /= float64(n)
		r.Within30[i] /= float64(n)
	}
	r.MedianHarmless, r.MedianHarmful = median(harmless), median(harmful)
	r.MedianTo50, r.MedianTo30 = median(to50), median(to30)
	return r
}

// simCall is one call's outcome and latency.
func simCall(rng *rand.Rand, rate float64) (failed bool, d time.Duration) {
	return rng.Float64() >= rate, 80*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond)))
}

// add counts one call into s.
func add(s *si.Stats, failed bool, d time.Duration) {
	s.Calls++
	s.TotalLatency += d
	if failed {
		s.Failures++
		s.ConsecutiveFailures++
	} else {
		s.SuccessLatency += d
		s.ConsecutiveFailures = 0
	}
}

// simChange verifies one change that moves the success rate from base to
// after, and returns whether it was rolled back and after how many calls
// (of both arms, under MethodCanary).
func simChange(rng *rand.Rand, p si.RollbackPolicy, base, after float64) (rolledBack bool, calls int) {
	const window, regime = 200, 16
	var e si.Evidence
	for i := range window {
		failed, d := simCall(rng, base)
		add(&e.Window, failed, d)
		if i >= window-regime {
			add(&e.Before, failed, d)
		}
	}
	if p.SeedCompatible {
		e.Before = e.Window
	}
	e.Before.ConsecutiveFailures, e.Window.ConsecutiveFailures = 0, 0
	fraction := 0.0
	if p.Method == si.MethodCanary {
		fraction = si.DefaultCanaryFraction
	}
	for calls = 1; calls <= 100000; calls++ {
		if rng.Float64() < fraction {
			failed, d := simCall(rng, base)
			add(&e.Control, failed, d)
			add(&e.StreakControl, failed, d)
		} else {
			failed, d := simCall(rng, after)
			if !failed || e.After.ConsecutiveFailures == 0 {
				e.StreakControl = si.Stats{}
			}
			add(&e.After, failed, d)
		}
		switch p.Decide(e).Decision {
		case si.DecisionRollback:
			return true, calls
		case si.DecisionConfirm:
			return false, calls
		}
	}
	panic("no decision after 100,000 calls")
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// regimeShift runs the regime-shift scenario through a real Loop on a fake
// clock: an agent calls an upstream that answers in 100 ms, under a 150 ms
// timeout; the upstream's latency doubles, calls time out, and the built-in
// strategy raises the timeout to 225 ms, which restores service at the new
// latency. It returns whether the fix was kept, and the verdict.
func regimeShift(t testing.TB, p si.RollbackPolicy) (kept bool, verdict string) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithDir(t.TempDir()), si.WithNotifier(nil), si.WithLogger(discard), si.WithClock(clk),
		si.WithRollbackPolicy(p), si.WithDefaultConfig(si.Config{Timeout: 150 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	latency := 100 * time.Millisecond
	fn := func(_ context.Context, cfg si.Config) error {
		if latency > cfg.Timeout {
			clk.Advance(cfg.Timeout)
			return context.DeadlineExceeded
		}
		clk.Advance(latency)
		return nil
	}
	for range 200 {
		if _, err := l.ExecuteWithImprovement(ctx, "llm", fn); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
	}
	latency = 200 * time.Millisecond
	for range 1000 {
		rep, _ := l.ExecuteWithImprovement(ctx, "llm", fn)
		clk.Advance(10 * time.Second)
		switch {
		case rep.Confirmed != nil:
			return true, rep.Confirmed.Verdict
		case rep.Rollback != nil:
			return false, rep.Rollback.Verdict
		}
	}
	t.Fatalf("no decision; changes %+v", l.Changes("llm"))
	return false, ""
}

// benchTrials is n, or a tenth of it under -short: CI's one pass of
// every benchmark (-short) keeps the simulations running, and their
// tests give the figures.
func benchTrials(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// simN is how many changes of each kind the simulation runs.
const simN = 10000

func TestVerificationSimulation(t *testing.T) {
	n := simN
	if raceEnabled {
		n = simN / 10 // the race detector slows the policy's arithmetic tenfold; it has no goroutines to check
	}
	results := map[string]simResult{}
	var table strings.Builder
	fmt.Fprintf(&table, "| policy | base | false rollbacks | −20 within 30 calls | −20 within 60 | −20 caught | −30 within 30 | −30 within 60 | median calls: harmless | −20 | to 50%% | to 30%% | regime-shift fix |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sp := range simPolicies {
		kept, verdict := regimeShift(t, sp.p)
		t.Logf("%s: regime-shift fix kept %v: %s", sp.name, kept, verdict)
		if want := !sp.p.SeedCompatible; kept != want {
			t.Errorf("%s: regime-shift fix kept = %v, want %v (%s)", sp.name, kept, want, verdict)
		}
		for _, base := range simBases {
			r := simulate(sp.p, base, n, 1)
			k := "rolled back"
			if kept {
				k = "kept"
			}
			fmt.Fprintf(&table, "| %s | %.0f%% | %.2f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.2f%% | %.0f | %.0f | %.0f | %.0f | %s |\n", sp.name, 100*base,
				100*r.FalseRollbacks, 100*r.Detected30, 100*r.Within20[look60], 100*r.Detected, 100*r.Caught30In30, 100*(1-r.Kept30Over60),
				r.MedianHarmless, r.MedianHarmful, r.MedianTo50, r.MedianTo30, k)
			if base == 0.90 {
				results[sp.name] = r
			}
		}
	}
	t.Logf("%d changes of each kind per row:\n%s", n, table.String())
	// Under -race, a tenth of the changes: the targets are checked with two
	// standard errors of that sample's share.
	tol := 0.0
	if n < simN {
		tol = 2 * math.Sqrt(0.05*0.95/float64(n))
	}
	checkSequential(t, results["sequential"], results["seed"], tol)
	checkDefault(t, results["default"], tol)
	// No method keeps a 30-point loss past 60 calls in more than 1 % of
	// cases (SeedCompatible, the original rule kept literally, aside).
	for _, name := range []string{"default", "sequential", "canary", "fixed"} {
		if r := results[name]; r.Kept30Over60 > 0.01+tol {
			t.Errorf("%s: %.2f%% of 30-point losses kept past 60 calls, want at most 1%%", name, 100*r.Kept30Over60)
		}
	}
	t.Logf("sequential at 90 %%, share of losses rolled back within n calls, next to the best test on n calls at the same false-rollback rate:\n%s",
		distribution(results["sequential"]))

	// No test can roll back 95 % of the 90 → 70 % changes within 30 calls
	// while rolling back at most 1 % of the harmless ones: the best test on
	// 30 calls, even knowing the base rate exactly, catches this many.
	k, best := detectionBound(30, 0.1, 0.3, 0.01)
	t.Logf("best possible within 30 calls at ≤1%% false rollbacks: roll back at %d failures, %.1f%% caught", k, 100*best)
	if best >= 0.95 || results["sequential"].Detected30 > best {
		t.Errorf("bound %.3f, sequential within 30 calls %.3f", best, results["sequential"].Detected30)
	}
}

// distribution is MethodSequential's detection-time table: the share of
// 20- and 30-point losses (from 90 %) rolled back within n calls, and the
// Neyman–Pearson bound on n calls at the false-rollback rate it achieved.
func distribution(r simResult) string {
	var b strings.Builder
	alpha := max(r.FalseRollbacks, 1e-4)
	fmt.Fprintf(&b, "| within n calls | −20 points | bound | −30 points | bound |\n|---|---|---|---|---|\n")
	for i, n := range simLooks {
		_, b20 := detectionBound(n, 0.1, 0.3, alpha)
		_, b30 := detectionBound(n, 0.1, 0.4, alpha)
		fmt.Fprintf(&b, "| %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", n, 100*r.Within20[i], 100*b20, 100*r.Within30[i], 100*b30)
	}
	fmt.Fprintf(&b, "(bound: the most powerful test on n calls with the base rate known exactly, at %.2f%% false rollbacks)\n", 100*alpha)
	return b.String()
}

// checkDefault asserts the default policy's targets at a true 90 %
// success rate: a change that costs 30 points is rolled back within 30
// calls in at least 95 % of cases, and at most 5 % of harmless changes
// are rolled back.
func checkDefault(t *testing.T, r simResult, tol float64) {
	t.Helper()
	if r.Caught30In30 < 0.95-tol {
		t.Errorf("default: %.1f%% of 30-point losses rolled back within 30 calls, want at least 95%%", 100*r.Caught30In30)
	}
	if r.FalseRollbacks > 0.05+tol {
		t.Errorf("default: %.2f%% of harmless changes rolled back, want at most 5%%", 100*r.FalseRollbacks)
	}
	if r.Kept30Over60 > 0.01+tol {
		t.Errorf("default: %.2f%% of 30-point losses kept past 60 calls, want at most 1%%", 100*r.Kept30Over60)
	}
}

// detectionBound returns the most powerful (Neyman–Pearson) test on n
// calls of "the failure rate is q0" against "it is q1 > q0" whose false
// alarm rate is at most alpha: it rolls back at k or more failures, and
// catches a share best of the q1 changes. (Randomising at the boundary
// would add at most the mass of one more failure count.)
func detectionBound(n int, q0, q1, alpha float64) (k int, best float64) {
	tail := func(q float64, k int) float64 { // P(Binomial(n, q) >= k)
		p := 0.0
		for i := k; i <= n; i++ {
			p += binom(n, i) * math.Pow(q, float64(i)) * math.Pow(1-q, float64(n-i))
		}
		return p
	}
	for k = 0; tail(q0, k) > alpha; k++ {
	}
	return k, tail(q1, k)
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// checkSequential asserts MethodSequential's documented figures at a true
// 90 % success rate.
func checkSequential(t *testing.T, r, seed simResult, tol float64) {
	t.Helper()
	if r.FalseRollbacks > 0.01+tol/2 {
		t.Errorf("sequential: %.2f%% of harmless changes rolled back, want at most 1%%", 100*r.FalseRollbacks)
	}
	if r.Detected < 0.85 || r.Detected <= seed.Detected {
		t.Errorf("sequential: %.1f%% of harmful changes rolled back, want at least 85%% and more than the seed rule's %.1f%%", 100*r.Detected, 100*seed.Detected)
	}
	if r.MedianTo30 >= seed.MedianTo30 {
		t.Errorf("sequential: median %v calls to roll back a change to 30%%, want fewer than the seed rule's %v", r.MedianTo30, seed.MedianTo30)
	}
}

// BenchmarkVerificationSimulation reports each policy's figures as
// metrics: false rollbacks and detections in percent, median calls to a
// decision.
func BenchmarkVerificationSimulation(b *testing.B) {
	for _, sp := range simPolicies {
		for _, base := range simBases {
			b.Run(fmt.Sprintf("%s/base=%.0f", sp.name, 100*base), func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulate(sp.p, base, benchTrials(simN), 1)
				}
				b.ReportMetric(100*r.FalseRollbacks, "false%")
				b.ReportMetric(100*r.Detected, "caught%")
				b.ReportMetric(100*r.Detected30, "caught30%")
				b.ReportMetric(r.MedianHarmful, "calls-harmful")
				b.ReportMetric(r.MedianTo30, "calls-to30")
			})
		}
	}
}

// BenchmarkDecide measures one policy decision on a call under
// verification that does not end it (the common case while verifying).
func BenchmarkDecide(b *testing.B) {
	ms := time.Millisecond
	e := si.Evidence{
		Before:  si.Stats{Calls: 10, Failures: 1, TotalLatency: 1000 * ms},
		Window:  si.Stats{Calls: 200, Failures: 20, TotalLatency: 20000 * ms},
		After:   si.Stats{Calls: 9, Failures: 1, TotalLatency: 900 * ms},
		Control: si.Stats{Calls: 5, TotalLatency: 500 * ms},
	}
	for _, sp := range simPolicies {
		b.Run(sp.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if sp.p.Decide(e).Decision != si.DecisionWait {
					b.Fatal("decided")
				}
			}
		})
	}
}
