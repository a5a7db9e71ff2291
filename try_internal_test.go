package selfimprove

import (
	"errors"
	"testing"
	"time"
)

// TestTryRefusedStaysAway: a config the operator tries that is refused
// (its route is dead) leaves the agent as it was: away from its home
// route, with its probe schedule. Before, try cleared the agent's place
// on its ladder before apply refused the config, and returned no effect:
// the agent, still on the backup, no longer counted itself away and
// never went home on its own.
func TestTryRefusedStaysAway(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	r := testRules()
	s := newState("a", Config{Version: 2, Route: "backup"})
	s.Route = &routeState{Home: "primary", Away: true, ProbeAt: now.Add(5 * time.Second).UnixNano(), Every: int64(5 * time.Second), Good: 1,
		Dead: []routeDead{{Route: "spare", Until: now.Add(time.Hour).UnixNano(), Why: "model withdrawn"}}}
	want := *s.Route
	_, _, eff, err := s.try(now, Config{Route: "spare"}, "try the spare", r)
	if !errors.Is(err, ErrTweakRejected) {
		t.Fatalf("try of a dead route: %v, want ErrTweakRejected", err)
	}
	if s.Route.Home != want.Home || s.Route.Away != want.Away || s.Route.ProbeAt != want.ProbeAt || s.Route.Every != want.Every || s.Route.Good != want.Good {
		t.Errorf("after the refusal the route state is %+v, want %+v", *s.Route, want)
	}
	if eff.save || eff.publish {
		t.Errorf("a refused try saves or publishes: %+v", eff)
	}
}
