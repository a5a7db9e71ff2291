package selfimprove_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// scoringOn checks that a score given outside any call is refused: every
// tracked call carries its score slot, with nothing to turn on.
func scoringOn(t *testing.T, l *si.Loop) {
	t.Helper()
	if err := l.AddScore(context.Background(), 0.5); !errors.Is(err, si.ErrUnknownCall) {
		t.Fatalf("AddScore outside a call = %v, want ErrUnknownCall", err)
	}
}

// scoredCall runs one successful call of agent id that takes d, scores
// itself (when score ≥ 0) and reports cost (when cost ≥ 0).
func (e *env) scoredCall(id string, score, cost float64, d time.Duration) si.Report {
	e.t.Helper()
	rep, err := e.l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
		e.clk.Advance(d)
		if cost >= 0 {
			si.AddCost(ctx, cost)
		}
		if score >= 0 {
			if err := e.l.AddScore(ctx, score); err != nil {
				e.t.Errorf("AddScore: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func TestScoreByCallID(t *testing.T) {
	e := newEnv(t)
	rep := e.call("a", nil, time.Millisecond)
	other := e.call("a", nil, time.Millisecond)
	if rep.ID == 0 || len(rep.CallID()) != 16 {
		t.Fatalf("report ID %d (%q)", rep.ID, rep.CallID())
	}
	if err := e.l.Score("a", rep.ID, 0.75); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Score("a", other.ID, 0.25); err != nil {
		t.Fatal(err)
	}
	want := si.Stats{Scored: 2, Quality: 0.5, QualitySD: 0.25}
	check := func(when string) {
		t.Helper()
		v, _ := e.l.View("a")
		if got := v.Versions[1]; got != want {
			t.Errorf("%s: version 1's figures = %+v, want %+v", when, got, want)
		}
		if got := v.Routes[""]; got != want {
			t.Errorf("%s: route's figures = %+v, want %+v", when, got, want)
		}
		if s := e.l.Stats("a"); s.Scored != 2 || s.Quality != 0.5 {
			t.Errorf("%s: Stats = %+v", when, s)
		}
	}
	check("scored")
	// Bad input: a clear error, and nothing changes.
	bad := []struct {
		name  string
		id    uint64
		score float64
		want  error
	}{
		{"NaN", rep.ID, math.NaN(), si.ErrInvalidScore},
		{"above 1", rep.ID, 1.5, si.ErrInvalidScore},
		{"below 0", rep.ID, -0.1, si.ErrInvalidScore},
		{"+Inf", rep.ID, math.Inf(1), si.ErrInvalidScore},
		{"not an ID", rep.ID ^ 1<<60, 0.5, si.ErrUnknownCall},
		{"zero", 0, 0.5, si.ErrUnknownCall},
	}
	for _, b := range bad {
		if err := e.l.Score("a", b.id, b.score); !errors.Is(err, b.want) {
			t.Errorf("%s: Score = %v, want %v", b.name, err, b.want)
		}
	}
	if err := e.l.Score("b", rep.ID, 0.5); !errors.Is(err, si.ErrUnknownCall) {
		t.Errorf("another agent's call (which has no such version yet): %v, want ErrUnknownCall", err)
	}
	if err := e.l.Score("", rep.ID, 0.5); !errors.Is(err, si.ErrInvalidAgentID) {
		t.Errorf("empty agent ID: %v", err)
	}
	e.clk.Advance(si.ScoreHorizon + time.Second)
	if err := e.l.Score("a", rep.ID, 0.5); !errors.Is(err, si.ErrScoreTooLate) {
		t.Errorf("past the horizon: %v, want ErrScoreTooLate", err)
	}
	check("after bad input")
}

func TestScoreAndCostInsideTheCall(t *testing.T) {
	e := newEnv(t)
	scoringOn(t, e.l)
	e.scoredCall("a", 0.5, 2, time.Millisecond)
	e.scoredCall("a", 1, 4, time.Millisecond)
	e.scoredCall("a", -1, -1, time.Millisecond) // neither
	// A failed call that reports a cost raises the cost per success; it
	// is a quality sample only when scored.
	e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		si.AddCost(ctx, 6)
		return errBoom
	})
	v, _ := e.l.View("a")
	want := si.Stats{Scored: 2, Quality: 0.75, QualitySD: 0.25, Costed: 3, Cost: 12, CostPerSuccess: 6}
	if got := v.Versions[1]; got != want {
		t.Errorf("version 1's figures = %+v, want %+v", got, want)
	}
	if v.Stats.CostPerSuccess != 6 {
		t.Errorf("Stats = %+v", v.Stats)
	}
	if err := e.l.AddScore(context.Background(), 2); !errors.Is(err, si.ErrInvalidScore) {
		t.Errorf("AddScore(2) = %v", err)
	}
}

// qualityEnv is an agent "a" with 40 successful calls under v1 (route
// ""), each scored 0.9 and costing 1, and a change to route "b" (v2)
// under verification.
func qualityEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, si.WithStrategy(&tweakStrategy{tweaks: []si.Config{{Route: "b"}}}))
	scoringOn(t, e.l)
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		e.scoredCall("a", 0.9, 1, time.Millisecond)
	}
	e.call("a", errBoom, time.Millisecond)
	if rep := e.call("a", errBoom, time.Millisecond); rep.Improvement == nil {
		t.Fatalf("no change applied: %+v", rep)
	}
	return e
}

func TestQualityDropRollsBack(t *testing.T) {
	e := qualityEnv(t)
	for i := range 100 {
		rep := e.scoredCall("a", 0.6, 1, time.Millisecond)
		if rep.Confirmed != nil {
			t.Fatalf("call %d confirmed the change: %s", i+1, rep.Confirmed.Verdict)
		}
		if ch := rep.Rollback; ch != nil {
			if !strings.Contains(ch.Verdict, "mean quality fell from 0.900") || ch.After.Scored != i+1 || math.Abs(ch.After.Quality-0.6) > 1e-9 {
				t.Errorf("rollback %q, after %+v", ch.Verdict, ch.After)
			}
			t.Logf("rolled back on call %d: %s", i+1, ch.Verdict)
			return
		}
	}
	t.Fatal("a change that lowered quality from 0.9 to 0.6 was not rolled back in 100 calls")
}

func TestEqualQualityConfirmed(t *testing.T) {
	e := qualityEnv(t)
	for i := range 400 {
		rep := e.scoredCall("a", 0.9, 1, time.Millisecond)
		if rep.Rollback != nil {
			t.Fatalf("call %d rolled back a harmless change: %s", i+1, rep.Rollback.Verdict)
		}
		if ch := rep.Confirmed; ch != nil {
			if i+1 < 10 || !strings.Contains(ch.Verdict, "mean quality 0.900") || !strings.Contains(ch.Verdict, "cost per successful call 1 against 1") {
				t.Errorf("confirmed on call %d: %q", i+1, ch.Verdict)
			}
			return
		}
	}
	t.Fatal("a harmless change was not confirmed in 400 calls")
}

func TestCostRiseRollsBack(t *testing.T) {
	e := qualityEnv(t)
	for i := range 100 {
		rep := e.scoredCall("a", 0.9, 5, time.Millisecond)
		if rep.Confirmed != nil {
			t.Fatalf("call %d confirmed a change at 5× the cost: %s", i+1, rep.Confirmed.Verdict)
		}
		if ch := rep.Rollback; ch != nil {
			if i+1 != 20 || !strings.Contains(ch.Verdict, "cost per successful call rose 400% (1 to 5") {
				t.Errorf("rolled back on call %d: %q", i+1, ch.Verdict)
			}
			return
		}
	}
	t.Fatal("a change at 5× the cost was not rolled back")
}

// TestLateScoreCreditedAcrossRollbackAndRestart: scores that arrive ten
// minutes late go to the version the call ran under, after that version
// was rolled back and the loop restarted.
func TestLateScoreCreditedAcrossRollbackAndRestart(t *testing.T) {
	e := qualityEnv(t)
	var under2 []si.Report
	for range 100 {
		rep := e.scoredCall("a", 0.6, 1, time.Millisecond)
		if rep.ConfigVersion == 2 && rep.Rollback == nil {
			under2 = append(under2, rep)
		}
		if rep.Rollback != nil {
			break
		}
	}
	if c := e.l.Config("a"); c.Version != 1 {
		t.Fatalf("config v%d, want v1 after the rollback", c.Version)
	}
	v, _ := e.l.View("a")
	before := v.Versions[2]
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	e.clk.Advance(10 * time.Minute)
	for i, rep := range under2 {
		// Calls 1 ms apart can share an ID (its unit is 1.05 ms): each
		// score has a key of its own, so that each counts.
		if _, err := e.l.ScoreCall("a", rep.ID, 0.2, uint64(i+1)); err != nil {
			t.Fatalf("late score: %v", err)
		}
	}
	v, _ = e.l.View("a")
	got := v.Versions[2]
	if got.Scored != before.Scored+len(under2) || v.Routes["b"].Scored != got.Scored {
		t.Errorf("v2 after late scores: %+v (before %+v, %d late scores); route b: %+v", got, before, len(under2), v.Routes["b"])
	}
	if v.Versions[1].Scored != 40 {
		t.Errorf("v1's scores moved: %+v", v.Versions[1])
	}
}

// TestKeptContextStaysTheCalls: fn may keep its context after it returns
// (a stream read later); that context stays the call's, whatever the
// calls after it do, and a score through it after the call is lost.
func TestKeptContextStaysTheCalls(t *testing.T) {
	e := newEnv(t)
	scoringOn(t, e.l)
	parent, cancel := context.WithCancel(context.Background())
	var kept context.Context
	e.l.ExecuteWithImprovement(parent, "a", func(ctx context.Context, _ si.Config) error {
		kept = ctx
		return nil
	})
	for range 10 {
		e.scoredCall("a", 1, -1, time.Millisecond)
	}
	if kept.Err() != nil {
		t.Fatal("the kept context ended before its parent")
	}
	cancel()
	if kept.Err() == nil {
		t.Error("the kept context did not end with its parent")
	}
	if err := e.l.AddScore(kept, 0); !errors.Is(err, si.ErrScoreTooLate) {
		t.Errorf("AddScore after the call: %v, want ErrScoreTooLate (the call was booked)", err)
	}
	if v, _ := e.l.View("a"); v.Versions[1].Scored != 10 || v.Versions[1].Quality != 1 {
		t.Errorf("figures %+v", v.Versions[1])
	}
}

// TestFirstScoreAndCostBooked: in a fresh process, with no start-up
// call, a Loop's first call books its score and its cost, under a Budget
// or not; a cost reported outside any call, or a score given with a
// context of no tracked call, changes nothing, here or in another Loop.
func TestFirstScoreAndCostBooked(t *testing.T) {
	if looptest.FreshProcess(t) {
		return
	}
	e := newEnv(t)
	call := func(l *si.Loop, ctx context.Context, score, cost float64) {
		t.Helper()
		l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, _ si.Config) error {
			si.AddCost(ctx, cost)
			if err := l.AddScore(ctx, score); err != nil {
				t.Errorf("AddScore in a call: %v", err)
			}
			return nil
		})
	}
	call(e.l, context.Background(), 0.75, 2)
	if v, _ := e.l.View("a"); v.Versions[1].Scored != 1 || v.Versions[1].Quality != 0.75 || v.Versions[1].Costed != 1 || v.Versions[1].CostPerSuccess != 2 {
		t.Fatalf("the first call's figures %+v, want its score and cost", v.Versions[1])
	}
	si.AddCost(context.Background(), 5) // outside any call: booked nowhere
	if err := e.l.AddScore(context.Background(), 1); !errors.Is(err, si.ErrUnknownCall) {
		t.Errorf("AddScore outside a call: %v, want ErrUnknownCall", err)
	}
	call(e.l, si.WithBudget(context.Background(), &si.Budget{Cost: 100}), 0.25, 4)
	if v, _ := e.l.View("a"); v.Versions[1].Scored != 2 || v.Versions[1].Quality != 0.5 || v.Versions[1].Costed != 2 || v.Versions[1].CostPerSuccess != 3 {
		t.Errorf("figures %+v after a call under a Budget", v.Versions[1])
	}
	other := newEnv(t)
	call(other.l, context.Background(), 1, 1)
	if v, _ := other.l.View("a"); v.Versions[1].Scored != 1 || v.Versions[1].Costed != 1 || v.Versions[1].CostPerSuccess != 1 {
		t.Errorf("another Loop's first call: %+v", v.Versions[1])
	}
}

// TestLateScoresRollBack: scores that arrive by ID after the calls judge
// the change under verification at once, and the rollback is saved and
// notified like any.
func TestLateScoresRollBack(t *testing.T) {
	e := qualityEnv(t)
	var ids []uint64
	for range 30 {
		ids = append(ids, e.scoredCall("a", -1, -1, time.Millisecond).ID)
	}
	if c := e.l.Config("a"); c.Version != 2 {
		t.Fatalf("config v%d before the scores, want v2 still verified", c.Version)
	}
	for i, id := range ids {
		if err := e.l.Score("a", id, 0.5); err != nil {
			t.Fatal(err)
		}
		if c := e.l.Config("a"); c.Version == 1 {
			t.Logf("rolled back on the %dth late score", i+1)
			chs := e.l.Changes("a")
			if ch := chs[len(chs)-1]; ch.State != si.ChangeRolledBack || !strings.Contains(ch.Verdict, "mean quality fell") {
				t.Errorf("change %+v", ch)
			}
			e.rec.waitFor(t, 2) // applied, rolled back
			return
		}
	}
	t.Fatal("30 late scores of 0.5 against 0.9 did not roll the change back")
}

// TestProposeOnly: with RollbackPolicy.ProposeOnly the loop files the
// strategy's tweak as a proposal instead of applying it; the approved
// proposal is verified like any change.
func TestProposeOnly(t *testing.T) {
	e := newEnv(t, si.WithStrategy(&tweakStrategy{tweaks: []si.Config{{Route: "b"}}}),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1, ProposeOnly: true}))
	e.call("a", errBoom, time.Millisecond)
	if rep := e.call("a", errBoom, time.Millisecond); rep.Improvement != nil || !rep.ImprovementTriggered {
		t.Fatalf("report %+v: want an analysis and no change", rep)
	}
	if c := e.l.Config("a"); c.Version != 1 {
		t.Fatalf("config v%d applied in propose-only mode", c.Version)
	}
	ps := e.l.Proposals(func(p si.Proposal) bool { return p.AgentID == "a" && p.Status == si.ProposalPending })
	if len(ps) != 1 || ps[0].Config.Route != "b" {
		t.Fatalf("proposals %+v", ps)
	}
	if err := e.l.Approve(ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.l.View("a"); v.Config.Route != "b" || v.Change == nil || v.Change.State != si.ChangeVerifying {
		t.Fatalf("after approval: config %+v, change %+v", v.Config, v.Change)
	}
}
