package selfimprove_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// lateScore is a score a grader gives a call by its ID at due.
type lateScore struct {
	id    uint64
	due   time.Time
	score float64
}

// TestLateGraderIsNotScoreless: every call of the agent is scored, by a
// grader that answers 3 minutes after the call (well within
// ScoreHorizon), and every call is costed. The agent scores every call,
// so a cheaper candidate worse by 0.2 is never confirmed on its cost
// alone (docs/quality.md: "a saving is never taken on cost alone").
// Before, at 10 calls a second, the 1,000 calls with a cost that came
// before the first score made the loop take the agent for one that
// scores none, and it confirmed the candidate at call 1,020 on its cost.
func TestLateGraderIsNotScoreless(t *testing.T) {
	e := newEnv(t, si.WithStrategy(&si.BuiltinStrategy{}), si.WithRollbackPolicy(si.RollbackPolicy{}),
		si.WithExploration(si.Exploration{Share: 0.1}),
		si.WithCandidates(si.Candidate{Name: "cheap", Route: "small"}))
	r := rand.New(rand.NewPCG(1, 2))
	quality := map[string]float64{"": 0.85, "small": 0.65}
	cost := map[string]float64{"": 1, "small": 0.5}
	var queue []lateScore
	given := 0
	const delay = 3 * time.Minute
	for i := range 6000 {
		e.clk.Advance(100 * time.Millisecond)
		var route string
		rep, err := e.l.ExecuteWithImprovement(context.Background(), "bot", func(ctx context.Context, cfg si.Config) error {
			route = cfg.Route
			si.AddCost(ctx, cost[cfg.Route])
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		queue = append(queue, lateScore{rep.ID, e.clk.Now().Add(delay), scoresim.Beta(r, quality[route], 0.15)})
		check := func(c *si.Change, how string) {
			if c != nil && c.To.Route == "small" && c.State == si.ChangeConfirmed {
				t.Errorf("call %d (%s): the cheaper candidate, 0.2 worse, was confirmed although every call is scored (%d scores given so far): %s",
					i+1, how, given, c.Verdict)
			}
		}
		check(rep.Confirmed, "a call")
		for len(queue) > 0 && !queue[0].due.After(e.clk.Now()) {
			res, err := e.l.ScoreCall("bot", queue[0].id, queue[0].score, 0)
			if err != nil {
				t.Fatalf("late score: %v", err)
			}
			queue = queue[1:]
			given++
			check(res.Confirmed, "a late score")
		}
	}
	if c := e.l.Config("bot"); c.Route == "small" {
		t.Fatalf("the agent ended on the cheaper, worse candidate: %+v", c)
	}
	for _, ch := range e.l.Changes("bot") {
		if ch.To.Route == "small" && ch.State == si.ChangeConfirmed && !strings.Contains(ch.Verdict, "within") {
			t.Fatalf("confirmed on cost alone: %s", ch.Verdict)
		}
	}
}
