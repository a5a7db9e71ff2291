package selfimprove

import (
	"testing"
	"time"
)

// A run of the change's failures is laid on it, under MethodCanary, only
// if the previous config succeeded between them: a call of the previous
// config that succeeds after the run (the first call after a shared
// outage) says nothing about the run until the change fails again.
func TestStateCanaryStreakNeedsAFailureAfterTheControlSuccess(t *testing.T) {
	for _, tt := range []struct {
		name string
		next bool // the change's call after the control success fails
		want bool // rolled back
	}{
		{"the change succeeds next: the outage is over", false, false},
		{"the change fails next: the run is the change's", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := freshState()
			r := testRules(func(r *ruleBook) { r.policy = RollbackPolicy{Method: MethodCanary, MinBeforeCalls: -1}.withDefaults() })
			applyTimeout(t, s, r)
			at := st0.Add(time.Minute)
			arm := func(a Arm, failed bool) {
				at = at.Add(time.Minute)
				c := call{gen: s.Gen, version: s.Config.Version, arm: a, end: at, dur: 10 * time.Millisecond, failed: failed}
				if a == ArmControl {
					c.version--
				}
				recordOf(s, &c, nil, r)
			}
			for range 3 {
				arm(ArmChange, false)
			}
			// A shared outage: 30 failures of the change, 2 of the
			// previous config among them.
			for i := range 30 {
				arm(ArmChange, true)
				if i == 10 || i == 20 {
					arm(ArmControl, true)
				}
			}
			arm(ArmControl, false)
			if s.Verifying == nil {
				t.Fatalf("rolled back on the previous config's first success after the run: %s", s.Changes[len(s.Changes)-1].Verdict)
			}
			arm(ArmChange, tt.next)
			if rolledBack := s.Verifying == nil; rolledBack != tt.want {
				t.Fatalf("rolled back = %v, want %v (%+v)", rolledBack, tt.want, s.Changes)
			}
		})
	}
}
