package selfimprove_test

import (
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetScoresCountedWhileEvicted: as TestFleetStatsCountCallsMadeWhileEvicted
// for scores and costs: a replica that evicted an agent and loads it
// again books, once synced, the scores and costs the other replicas gave
// while it was out of memory, each once.
func TestFleetScoresCountedWhileEvicted(t *testing.T) {
	e := newFleetEnv(t, 2, nil, si.WithMaxAgents(1))
	a := e.reps[0]
	for _, l := range e.reps {
		scoringOn(t, l)
	}
	for i := range 6 {
		e.scored(i%3/2, "x", 0.8, 1, false) // replica 0 four, replica 1 two
	}
	e.sync()
	e.sync()
	if v, _ := a.View("x"); v.Versions[1].Scored != 6 {
		t.Fatalf("replica 0 before the eviction: %d scores, want 6", v.Versions[1].Scored)
	}
	e.call(0, "other", nil) // evicts x on replica 0
	if m := a.Metrics(); m.Evictions != 1 {
		t.Fatalf("replica 0 evicted %d agents, want 1 (test setup)", m.Evictions)
	}
	const n = 5 // replica 1's scored calls while x is out of replica 0's memory
	for range n {
		e.scored(1, "x", 0.8, 1, false)
	}
	if err := e.reps[1].SyncFleet(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.scored(0, "x", 0.8, 1, false) // loaded again from replica 0's store
	e.sync()
	e.sync()
	const want = 6 + n + 1
	for r, l := range e.reps {
		if v, _ := l.View("x"); v.Versions[1].Scored != want || v.Versions[1].Costed != want {
			t.Errorf("replica %d: %d scores, %d costs; the fleet's are %d", r, v.Versions[1].Scored, v.Versions[1].Costed, want)
		}
	}
}
