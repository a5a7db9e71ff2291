package selfimprove

import (
	"math"
	"math/big"
	"testing"
)

// predictiveTail against the beta-binomial computed exactly in rationals
// for integer shape parameters: P(F = k) = C(n, k) B(k+a, n-k+b) / B(a, b).
func TestPredictiveTailExact(t *testing.T) {
	beta := func(a, b int64) *big.Rat { // B(a, b) = (a-1)!(b-1)!/(a+b-1)!
		f := func(n int64) *big.Int { return new(big.Int).MulRange(1, max(n, 1)) }
		num := new(big.Int).Mul(f(a-1), f(b-1))
		return new(big.Rat).SetFrac(num, f(a+b-1))
	}
	for _, c := range []struct{ n, f, a, b int }{
		{60, 13, 20, 180}, {60, 0, 3, 7}, {60, 61, 3, 7}, {54, 21, 21, 181}, {6, 4, 20, 180}, {16, 5, 1, 1}, {100, 50, 40, 40},
	} {
		want := new(big.Rat)
		for k := max(c.f, 0); k <= c.n; k++ {
			term := new(big.Rat).SetInt(new(big.Int).Binomial(int64(c.n), int64(k)))
			term.Mul(term, beta(int64(k+c.a), int64(c.n-k+c.b)))
			term.Quo(term, beta(int64(c.a), int64(c.b)))
			want.Add(want, term)
		}
		w, _ := want.Float64()
		if c.f <= 0 {
			w = 1
		}
		got := predictiveTail(c.n, c.f, float64(c.a), float64(c.b))
		if math.Abs(got-w) > 1e-9*max(w, 1e-12) && math.Abs(got-w) > 1e-15 {
			t.Errorf("predictiveTail(%d, %d, %d, %d) = %g, want %g", c.n, c.f, c.a, c.b, got, w)
		}
	}
}

// The backstop decides on the BackstopCalls-th call only, for every
// method, and not under SeedCompatible.
func TestBackstopEveryMethod(t *testing.T) {
	ref := Evidence{Before: newStats(16, 2, 0), Window: newStats(200, 20, 0)}
	for _, m := range []Method{MethodQuick, MethodSequential, MethodCanary, MethodFixed} {
		// Sequential tests that cannot decide by 60 calls.
		p := RollbackPolicy{Method: m, MaxConsecutiveFailures: -1, FalseRollbacks: 1e-9, MissedRollbacks: 1e-9}.withDefaults()
		// 30-point loss, spread so that nothing else decides first: 15
		// failures in 60 calls (a failure every 4th call).
		e := ref
		var verdict Verdict
		at := 0
		for n := 1; n <= 100; n++ {
			calls, fails := n, n/4
			if m == MethodCanary {
				// 10 % of the calls on the previous config, all fine.
				e.Control = newStats(n/10, 0, 0)
				calls = n - n/10
				fails = calls / 4
			}
			e.After = newStats(calls, fails, 0)
			if v := p.Decide(e); v.Decision != DecisionWait {
				verdict, at = v, n
				break
			}
		}
		if verdict.Decision != DecisionRollback || at != DefaultBackstopCalls {
			t.Errorf("%v: %v at call %d, want a rollback by the backstop at %d (%s)", m, verdict.Decision, at, DefaultBackstopCalls, verdict.Reason)
		}
	}
	seed := RollbackPolicy{SeedCompatible: true}.withDefaults()
	if seed.BackstopCalls >= 0 {
		t.Errorf("SeedCompatible: BackstopCalls %d, want off", seed.BackstopCalls)
	}
}

// MethodFixed with the backstop: the fixed rule rolls back on the
// MinCalls-th call only; a change it keeps is confirmed at BackstopCalls.
func TestFixedTwoStages(t *testing.T) {
	p := RollbackPolicy{Method: MethodFixed}
	e := Evidence{Before: newStats(16, 2, 0), Window: newStats(200, 20, 0)}
	e.After = newStats(10, 4, 0) // 60 % against 87.5 %: rolled back on the 10th
	if v := p.Decide(e); v.Decision != DecisionRollback {
		t.Errorf("10 calls at 60%%: %v (%s)", v.Decision, v.Reason)
	}
	e.After = newStats(11, 5, 0) // the same fall on the 11th call: the 10th kept it
	if v := p.Decide(e); v.Decision != DecisionWait {
		t.Errorf("11 calls at 55%%: %v (%s)", v.Decision, v.Reason)
	}
	e.After = newStats(10, 1, 0)
	if v := p.Decide(e); v.Decision != DecisionWait {
		t.Errorf("10 calls at 90%%: %v (%s), want to wait for the backstop", v.Decision, v.Reason)
	}
	e.After = newStats(60, 6, 0)
	if v := p.Decide(e); v.Decision != DecisionConfirm {
		t.Errorf("60 calls at 90%%: %v (%s), want confirm", v.Decision, v.Reason)
	}
	e.After = newStats(60, 16, 0)
	if v := p.Decide(e); v.Decision != DecisionRollback {
		t.Errorf("60 calls at 73%%: %v (%s), want the backstop's rollback", v.Decision, v.Reason)
	}
}

// Decide allocates nothing when it waits, at the backstop's call too.
func TestDecideAtBackstopAllocatesNothing(t *testing.T) {
	e := Evidence{Before: newStats(16, 2, 0), Window: newStats(200, 20, 0), After: newStats(60, 7, 0)}
	for _, m := range []Method{MethodQuick, MethodSequential, MethodCanary} {
		p := RollbackPolicy{Method: m, FalseRollbacks: 1e-9, MissedRollbacks: 1e-9} // undecided at 60
		ev := e
		if m == MethodCanary {
			ev.After, ev.Control = newStats(54, 6, 0), newStats(6, 0, 0)
		}
		if v := p.Decide(ev); v.Decision != DecisionWait {
			t.Fatalf("%v: %v (%s), want wait", m, v.Decision, v.Reason)
		}
		if n := testing.AllocsPerRun(100, func() { p.Decide(ev) }); n != 0 {
			t.Errorf("%v: %v allocations", m, n)
		}
	}
}
