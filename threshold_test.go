package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
)

func TestProfileBoundaries(t *testing.T) {
	tests := []struct {
		calls int
		want  si.Profile
	}{
		{0, si.ProfileLow},
		{9, si.ProfileLow},
		{10, si.ProfileMedium},
		{100, si.ProfileMedium},
		{101, si.ProfileHigh},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.calls), func(t *testing.T) {
			e := newEnv(t)
			e.calls("a", tt.calls, nil, 0)
			_, got := e.l.Threshold("a")
			if got != tt.want {
				t.Errorf("%d calls a day: profile %s, want %s", tt.calls, got, tt.want)
			}
			if s := e.l.Stats("a"); s.Profile != tt.want || s.CallsPerDay != tt.calls {
				t.Errorf("stats = %+v", s)
			}
		})
	}
}

func TestProfileFollowsTheLast24Hours(t *testing.T) {
	e := newEnv(t)
	e.calls("a", 101, nil, 0)
	if _, p := e.l.Threshold("a"); p != si.ProfileHigh {
		t.Fatalf("profile %s", p)
	}
	e.clk.Advance(23 * time.Hour)
	if _, p := e.l.Threshold("a"); p != si.ProfileHigh {
		t.Fatalf("after 23h: profile %s, want high", p)
	}
	e.clk.Advance(time.Hour)
	if _, p := e.l.Threshold("a"); p != si.ProfileLow {
		t.Fatalf("after 24h: profile %s, want low", p)
	}
}

func TestThresholdTable(t *testing.T) {
	tests := []struct {
		profile  si.Profile
		setup    func(e *env)
		want     si.Threshold
		failures int // failures that trigger
	}{
		{si.ProfileHigh, func(e *env) { e.calls("a", 101, nil, 0) }, si.Threshold{Failures: 5, Window: 48 * time.Hour, Cooldown: 3 * time.Hour}, 5},
		{si.ProfileMedium, func(e *env) { e.calls("a", 10, nil, 0) }, si.Threshold{Failures: 3, Window: 24 * time.Hour, Cooldown: 6 * time.Hour}, 3},
		{si.ProfileLow, func(e *env) {}, si.Threshold{Failures: 2, Window: 72 * time.Hour, Cooldown: 12 * time.Hour}, 2},
		{si.ProfileCritical, func(e *env) { e.l.MarkCritical("a", true) }, si.Threshold{Failures: 1, Window: 24 * time.Hour, Cooldown: 6 * time.Hour}, 1},
		{si.ProfileManual, func(e *env) {
			e.calls("a", 101, nil, 0)
			e.l.MarkCritical("a", true)
			e.l.SetThreshold("a", si.Threshold{Failures: 4, Window: time.Hour, Cooldown: time.Minute})
		}, si.Threshold{Failures: 4, Window: time.Hour, Cooldown: time.Minute}, 4},
	}
	for _, tt := range tests {
		t.Run(string(tt.profile), func(t *testing.T) {
			e := newEnv(t)
			tt.setup(e)
			th, p := e.l.Threshold("a")
			if p != tt.profile {
				t.Fatalf("profile %s, want %s", p, tt.profile)
			}
			if diff := cmp.Diff(tt.want, th); diff != "" {
				t.Fatalf("threshold (-want +got):\n%s", diff)
			}
			// One failure short of the threshold does not trigger; the next does.
			for i := 1; i < tt.failures; i++ {
				if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
					t.Fatalf("triggered after %d failures", i)
				}
			}
			if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
				t.Fatalf("did not trigger after %d failures", tt.failures)
			}
			// Cooldown: one nanosecond short does not trigger, the end does.
			e.clk.Advance(th.Cooldown - 1)
			if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
				t.Fatal("triggered 1ns before the cooldown ended")
			}
			e.clk.Advance(1)
			if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
				t.Fatal("did not trigger when the cooldown ended")
			}
		})
	}
}

func TestCriticalIsNeverGuessedFromTheName(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"product-search", "prod", "critical-alerts", "production"} {
		if _, p := e.l.Threshold(id); p != si.ProfileLow {
			t.Errorf("agent %q: profile %s, want low", id, p)
		}
		if rep := e.call(id, errBoom, 0); rep.ImprovementTriggered {
			t.Errorf("agent %q: one failure triggered", id)
		}
	}
	e.l.MarkCritical("prod", true)
	e.l.MarkCritical("prod", false)
	if _, p := e.l.Threshold("prod"); p != si.ProfileLow {
		t.Errorf("unmarked agent: profile %s", p)
	}
}

func TestSetThresholdValidatesAndClears(t *testing.T) {
	e := newEnv(t)
	for _, bad := range []si.Threshold{
		{Failures: 0, Window: time.Hour},
		{Failures: si.MaxThresholdFailures + 1, Window: time.Hour},
		{Failures: 1, Window: 0},
		{Failures: 1, Window: time.Hour, Cooldown: -1},
	} {
		if err := e.l.SetThreshold("a", bad); !errors.Is(err, si.ErrInvalidThreshold) {
			t.Errorf("SetThreshold(%+v) = %v, want ErrInvalidThreshold", bad, err)
		}
	}
	if err := e.l.SetThreshold("a", si.Threshold{Failures: si.MaxThresholdFailures, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, p := e.l.Threshold("a"); p != si.ProfileManual {
		t.Fatalf("profile %s", p)
	}
	if err := e.l.SetThreshold("a", si.Threshold{}); err != nil {
		t.Fatal(err)
	}
	if _, p := e.l.Threshold("a"); p != si.ProfileLow {
		t.Fatalf("after clearing: profile %s", p)
	}
}

func TestManualThresholdOfSixtyFourFailures(t *testing.T) {
	e := newEnv(t)
	e.l.SetThreshold("a", si.Threshold{Failures: si.MaxThresholdFailures, Window: time.Hour, Cooldown: time.Hour})
	for i := 1; i < si.MaxThresholdFailures; i++ {
		if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
			t.Fatalf("triggered after %d failures", i)
		}
	}
	if rep := e.call("a", errBoom, 0); !rep.ImprovementTriggered {
		t.Fatal("did not trigger at the 64th failure")
	}
}

// Issue 27: an operator's threshold is obeyed from the first call. Before,
// MarkCritical and SetThreshold(Failures: 1) first acted on the 10th
// failing call: the cold-start minimum (MinBeforeCalls) overrode them.
func TestOperatorThresholdFromTheFirstCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(l *si.Loop) error
	}{
		{"critical", func(l *si.Loop) error { return l.MarkCritical("a", true) }},
		{"manual", func(l *si.Loop) error {
			return l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour, Cooldown: time.Hour})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			strat := &countingStrategy{tweak: si.Config{MaxAttempts: 2}}
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(strat))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := tc.set(l); err != nil {
				t.Fatal(err)
			}
			rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return errBoom })
			if strat.runs.Load() != 1 || rep.Improvement == nil {
				t.Fatalf("the first failing call ran the strategy %d times (improvement %v), want once", strat.runs.Load(), rep.Improvement)
			}
		})
	}
	// An automatically profiled agent still waits for MinBeforeCalls.
	strat := &countingStrategy{tweak: si.Config{MaxAttempts: 2}}
	l, _ := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(strat))
	defer l.Close()
	for range 9 {
		l.ExecuteWithImprovement(context.Background(), "b", func(context.Context, si.Config) error { return errBoom })
	}
	if n := strat.runs.Load(); n != 0 {
		t.Fatalf("a new agent's first 9 calls ran the strategy %d times", n)
	}
}

// A getter changes nothing: an agent whose profile moves high → medium →
// low while it is idle keeps the same window whether or not someone read
// it meanwhile (a dashboard polls View every few seconds). Before, a read
// at the medium profile narrowed the window to 24 hours in place and
// dropped a failure 30 hours old that the low profile's 72 hours still
// count at the next call: the watched agent then reported 0 failures,
// the unwatched one 1.
func TestGettersChangeNothing(t *testing.T) {
	type read struct {
		Stats    si.Stats
		Clusters []si.Cluster
	}
	run := func(watch bool) read {
		e := newEnv(t)
		e.calls("a", 150, nil, 0)
		e.call("a", errBoom, 0) // t0: high profile (48 h)
		e.clk.Advance(20 * time.Hour)
		e.calls("a", 20, nil, 0) // t0+20h: still high
		e.clk.Advance(10 * time.Hour)
		if watch { // t0+30h: medium (24 h)
			if _, prof := e.l.Threshold("a"); prof != si.ProfileMedium {
				t.Fatalf("t0+30h: profile %s, want medium", prof)
			}
			if st, cl := e.l.Stats("a"), e.l.Clusters("a"); st.Failures != 0 || len(cl) != 0 || len(e.l.AllClusters()) != 0 {
				t.Fatalf("t0+30h: %d failures in the 24-hour window, clusters %+v: the getters disagree", st.Failures, cl)
			}
			e.l.Health("a")
			if _, ok := e.l.View("a"); !ok {
				t.Fatal("no view of a")
			}
			if _, _, ok := e.l.ViewCalls("a", nil); !ok {
				t.Fatal("no calls of a")
			}
			e.l.Clusters("a")
		}
		e.clk.Advance(15 * time.Hour)
		e.call("a", nil, 0) // t0+45h: low (72 h)
		st := e.l.Stats("a")
		if st.Profile != si.ProfileLow {
			t.Fatalf("t0+45h: profile %s, want low", st.Profile)
		}
		return read{st, e.l.Clusters("a")}
	}
	unwatched, watched := run(false), run(true)
	if unwatched.Stats.Failures != 1 || len(unwatched.Clusters) != 1 {
		t.Fatalf("unwatched: %d failures in the window, clusters %+v; want the one 45 hours old", unwatched.Stats.Failures, unwatched.Clusters)
	}
	if diff := cmp.Diff(unwatched, watched); diff != "" {
		t.Errorf("reading the agent changed it (-unwatched +watched):\n%s", diff)
	}
}
