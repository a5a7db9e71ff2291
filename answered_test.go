package selfimprove_test

import (
	"context"
	"errors"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestBookedByAnsweringRoute (issue 41, item 6): the score and cost of a
// call that its primary failed and a fallback answered, within the call,
// are booked to the fallback's route in AgentView.Routes (and to the
// config version, as before), also after a restart; a call the primary
// answered stays the primary's. Before, both were booked to the
// version's route, the primary's: the fallback's route had none.
func TestBookedByAnsweringRoute(t *testing.T) {
	opts := []si.Option{si.WithDefaultConfig(si.Config{MaxAttempts: 2}), si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}})}
	e := newEnv(t, opts...)
	gone := errors.New("404 model_not_found: the model `primary` does not exist")
	call := func(primaryUp bool) {
		t.Helper()
		_, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			if c.Route != "backup" && !primaryUp {
				return gone
			}
			cost, score := 1.0, 0.9
			if c.Route == "backup" {
				cost, score = 5, 0.4
			}
			si.AddCost(ctx, cost)
			return e.l.AddScore(ctx, score)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	call(true)
	call(false)
	check := func(when string) {
		t.Helper()
		v, _ := e.l.View("a")
		if got := v.Versions[1]; got.Scored != 2 || got.Costed != 2 || got.Cost != 6 {
			t.Errorf("%s: version 1's figures %+v, want both calls'", when, got)
		}
		want := map[string]si.Stats{
			"":       {Scored: 1, Quality: 0.9, Costed: 1, Cost: 1, CostPerSuccess: 1},
			"backup": {Scored: 1, Quality: 0.4, Costed: 1, Cost: 5, CostPerSuccess: 5},
		}
		for route, w := range want {
			if got := v.Routes[route]; got != w {
				t.Errorf("%s: route %q's figures %+v, want %+v", when, route, got, w)
			}
		}
		if len(v.Routes) != len(want) {
			t.Errorf("%s: routes %+v", when, v.Routes)
		}
	}
	check("booked")
	e.l.Close()
	e.open(opts...)
	check("after a restart")
}
