package selfimprove_test

import (
	"context"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// TestMoveNeedsARunOfItsClass: the built-in strategy moves the route on
// a run of failures another route can fix, and names their class. The
// window holds 10 scattered 503s, then 5 bad requests in a row (a bug in
// the caller's tool schema). Before, the move looked at the length of
// the run only: it moved to the backup, saying "the last 5 calls on
// route "primary" failed (overloaded)". When the run is of overloads, it
// moves, and says so.
func TestMoveNeedsARunOfItsClass(t *testing.T) {
	now := time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	analysis := func(runClass failure.Class, runErr string) si.Analysis {
		var fails []si.Failure
		for i := range 10 {
			fails = append(fails, si.Failure{Time: now.Add(-time.Duration(20-i) * time.Hour), Err: "503 Service Unavailable", Version: 1,
				Class: failure.ClassOverloaded, Cluster: "c503"})
		}
		for i := range 5 {
			fails = append(fails, si.Failure{Time: now.Add(-time.Duration(5-i) * time.Minute), Err: runErr, Version: 1, Class: runClass, Cluster: "crun"})
		}
		return si.Analysis{
			AgentID:   "a",
			Config:    si.Config{Version: 1, MaxAttempts: 3},
			Stats:     si.Stats{Calls: 200, Failures: 15, SuccessRate: 185.0 / 200, ConsecutiveFailures: 5, Profile: "high", Window: 48 * time.Hour},
			Threshold: si.Threshold{Failures: 5, Window: 48 * time.Hour, Cooldown: 3 * time.Hour},
			Failures:  fails,
			Clusters: []si.Cluster{
				{ID: "c503", Signature: "<n> service unavailable", Class: failure.ClassOverloaded, Count: 10, Total: 10, FirstSeen: fails[0].Time, LastSeen: fails[9].Time},
				{ID: "crun", Signature: runErr, Class: runClass, Count: 5, Total: 5, FirstSeen: fails[10].Time, LastSeen: fails[14].Time},
			},
			Trigger:           "crun",
			Health:            0.92,
			Routes:            si.Routes{Primary: "primary", Fallbacks: []string{"backup"}},
			TransientAttempts: 3,
			Time:              now,
		}
	}
	tw, err := (&si.BuiltinStrategy{}).Analyze(context.Background(), analysis(failure.ClassBadRequest, "400 invalid parameter: tools[0].function.parameters"))
	if err != nil {
		t.Fatal(err)
	}
	if tw != nil && tw.Config.Route == "backup" && !tw.Review {
		t.Errorf("moved to the fallback for a run of 5 bad requests, saying: %s", tw.Reason)
	}
	tw, err = (&si.BuiltinStrategy{}).Analyze(context.Background(), analysis(failure.ClassTimeout, "context deadline exceeded"))
	if err != nil || tw == nil || tw.Config.Route != "backup" || !strings.Contains(tw.Reason, "failed (timeout)") {
		t.Errorf("a run of 5 timeouts after scattered 503s: tweak %+v, error %v; want a move to the backup naming the timeouts", tw, err)
	}
}
