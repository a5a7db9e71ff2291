package selfimprove_test

import (
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetStatsCountCallsMadeWhileEvicted: a replica that evicted an
// agent (WithMaxAgents) and loads it again from its store counts, once
// synced, the calls the other replicas made while it was out of memory,
// failures among them, as every other call of the fleet's: pooled counts
// equal calls made. Before, the first pool after the load only started
// the count again: replica 0 reported 8 calls of 17, 1 failure of 4.
func TestFleetStatsCountCallsMadeWhileEvicted(t *testing.T) {
	e := newFleetEnv(t, 2, nil, si.WithMaxAgents(1))
	a, b := e.reps[0], e.reps[1]
	for i := range 5 {
		var err error
		if i == 0 {
			err = errBoom
		}
		e.call(0, "x", err)
	}
	for range 2 {
		e.call(1, "x", nil)
	}
	e.sync()
	e.sync() // replica 0 has booked replica 1's 2 calls
	if got := a.Stats("x").Calls; got != 7 {
		t.Fatalf("replica 0 before the eviction: %d calls, want 7", got)
	}
	e.call(0, "other", nil) // evicts x on replica 0
	if m := a.Metrics(); m.Evictions != 1 {
		t.Fatalf("replica 0 evicted %d agents, want 1 (test setup)", m.Evictions)
	}
	const n = 9 // replica 1's calls while x is out of replica 0's memory
	for i := range n {
		var err error
		if i%3 == 0 {
			err = errBoom
		}
		e.call(1, "x", err)
	}
	if err := b.SyncFleet(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.call(0, "x", nil) // loaded again from replica 0's store
	e.sync()
	e.sync()
	const calls, failures = 5 + 2 + n + 1, 1 + 3
	for r, l := range e.reps {
		if got := l.Stats("x"); got.Calls != calls || got.TotalCalls != calls || got.Failures != failures {
			t.Errorf("replica %d: Stats %d calls (%d in all), %d failures; want the fleet's %d calls, %d failures",
				r, got.Calls, got.TotalCalls, got.Failures, calls, failures)
		}
	}
	if cs := a.Clusters("x"); len(cs) != 1 || cs[0].Count != failures {
		t.Errorf("replica 0: Clusters %+v, want one of the fleet's %d failures", cs, failures)
	}
}
