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

// scripted is the outcome of call i of an agent under cfg: healthy for 20
// calls, then one call in two fails with a 503 until a tweak sets
// Params["fix"]: "good" heals it, "bad" fails every call.
func scripted(i int, cfg si.Config) error {
	switch {
	case i < 20 || cfg.Params["fix"] == "good":
		return nil
	case cfg.Params["fix"] == "bad" || i%2 == 0:
		return errors.New("upstream answered 503 Service Unavailable: overloaded")
	}
	return nil
}

// step is what one call's Report said, for comparing runs.
type step struct {
	Ran, After          int
	Applied, Rolled, OK bool
}

func stepOf(rep si.Report) step {
	return step{rep.ConfigVersion, rep.Version, rep.Improvement != nil, rep.Rollback != nil, rep.Confirmed != nil}
}

// runScript makes n calls of agent "a" by the script, each 100 ms apart:
// wrapped (ExecuteWithImprovement), or run by the test and reported with
// Record under the config Loop.Config gave, as an agent outside Go does.
func runScript(t *testing.T, tweak string, n int, recorded bool) ([]step, []si.Change) {
	t.Helper()
	strat := &tweakStrategy{tweaks: []si.Config{{Params: map[string]string{"fix": tweak}}}}
	e := newEnv(t, si.WithStrategy(strat))
	var steps []step
	for i := range n {
		var rep si.Report
		if recorded {
			cfg := e.l.Config("a")
			e.clk.Advance(100 * time.Millisecond)
			var err error
			rep, err = e.l.Record(context.Background(), "a", si.Report{Err: scripted(i, cfg), Duration: 100 * time.Millisecond, ConfigVersion: cfg.Version})
			if err != nil {
				t.Fatalf("call %d: Record: %v", i, err)
			}
		} else {
			rep, _ = e.l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
				e.clk.Advance(100 * time.Millisecond)
				return scripted(i, cfg)
			})
		}
		steps = append(steps, stepOf(rep))
	}
	return steps, e.l.Changes("a")
}

// TestRecordDecidesAsWrapped: outcomes booked with Record lead to the same
// decisions, call for call, as the same calls run by
// ExecuteWithImprovement: a fault triggers a change, a good change is
// confirmed, a harmful one is rolled back.
func TestRecordDecidesAsWrapped(t *testing.T) {
	for _, tc := range []struct {
		tweak string
		want  si.ChangeState
	}{{"good", si.ChangeConfirmed}, {"bad", si.ChangeRolledBack}} {
		t.Run(tc.tweak, func(t *testing.T) {
			wantSteps, wantChanges := runScript(t, tc.tweak, 60, false)
			gotSteps, gotChanges := runScript(t, tc.tweak, 60, true)
			if len(wantChanges) != 1 || wantChanges[0].State != tc.want {
				t.Fatalf("baseline (wrapped calls): changes %+v, want one %s", wantChanges, tc.want)
			}
			if diff := cmp.Diff(wantSteps, gotSteps); diff != "" {
				t.Errorf("reports, call by call (-wrapped +recorded):\n%s", diff)
			}
			ignore := func(c si.Change) si.Change { c.ID = ""; return c }
			if diff := cmp.Diff(ignore(wantChanges[0]), ignore(gotChanges[0])); len(gotChanges) != 1 || diff != "" {
				t.Errorf("changes (-wrapped +recorded):\n%s", diff)
			}
		})
	}
}

// TestRecordVersions: a call under an earlier version counts, but neither
// judges the change in force nor triggers; a version the agent never had,
// an invalid ID and a closed loop book nothing.
func TestRecordVersions(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	ctx := context.Background()
	for i := range 6 {
		rep, err := e.l.Record(ctx, "a", si.Report{Err: errBoom, ConfigVersion: 1})
		if err != nil || rep.Rollback != nil || rep.ConfigVersion != 1 || rep.Version != 2 {
			t.Fatalf("v1 failure %d: %+v, %v", i, rep, err)
		}
	}
	if ch := e.l.Changes("a"); len(ch) != 1 || ch[0].State != si.ChangeVerifying || ch[0].After.Calls != 0 {
		t.Fatalf("v1 calls judged the v2 change: %+v", ch)
	}
	before := e.l.Stats("a").Calls
	for _, tc := range []struct {
		id      string
		version int
		want    error
	}{{"a", 3, si.ErrUnknownVersion}, {"a", -1, si.ErrUnknownVersion}, {"", 1, si.ErrInvalidAgentID}} {
		if _, err := e.l.Record(ctx, tc.id, si.Report{Err: errBoom, ConfigVersion: tc.version}); !errors.Is(err, tc.want) {
			t.Errorf("Record(%q, v%d) = %v, want %v", tc.id, tc.version, err, tc.want)
		}
	}
	if got := e.l.Stats("a").Calls; got != before {
		t.Errorf("refused outcomes were booked: %d calls, want %d", got, before)
	}
	rep, err := e.l.Record(ctx, "a", si.Report{Err: errBoom, Ignored: true, ConfigVersion: 2})
	if err != nil || !rep.Ignored || e.l.Changes("a")[0].After.Calls != 0 {
		t.Errorf("ignored call: %+v, %v; change %+v", rep, err, e.l.Changes("a")[0])
	}
	for i := range 5 {
		rep, err = e.l.Record(ctx, "a", si.Report{Err: fmt.Errorf("call %d: %w", i, errBoom), ConfigVersion: 2})
	}
	if err != nil || rep.Rollback == nil || rep.Version != 1 {
		t.Fatalf("fifth v2 failure: %+v, %v", rep, err)
	}
	e.l.Close()
	if _, err := e.l.Record(ctx, "a", si.Report{}); !errors.Is(err, si.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
