package selfimprove

import "testing"

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
