package selfimprove_test

import (
	"fmt"
	"testing"
	"time"

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

// TestEvictedAgentsUnsentCallsReachTheFleet: calls a replica made of an
// agent and had not sent to the fleet yet when a new agent took it over
// WithMaxAgents reach the fleet, and every replica counts them once
// synced: pooled counts equal calls made. Before, the eviction dropped
// them with the agent's fleet link: the fleet counted 2 calls of 7.
func TestEvictedAgentsUnsentCallsReachTheFleet(t *testing.T) {
	e := newFleetEnv(t, 2, nil, si.WithMaxAgents(1))
	a := e.reps[0]
	for range 2 {
		e.call(1, "x", nil)
	}
	e.sync()
	for range 5 {
		e.call(0, "x", nil) // not sent yet
	}
	e.call(0, "other", nil) // takes replica 0 over its cap of 1 agent
	e.sync()
	// The statistics of x on replica 0, out of its memory now, are the
	// fleet's: those a replica sent last, at most every 2s.
	e.clk.Advance(3 * time.Second)
	e.sync()
	e.wantFleetCalls("x", 7)
	// The agent stayed until its calls were sent; then it went.
	if m := a.Metrics(); m.Agents != 1 || m.Evictions != 1 {
		t.Errorf("replica 0: %d agents in memory, %d evicted; want 1 and 1", m.Agents, m.Evictions)
	}
}

// TestAgentEvictedInAnOutageSendsItsCallsAtItsNextLoad: while the fleet
// cannot be reached, an agent whose calls have not gone to the fleet is
// evicted all the same (WithMaxAgents holds), and the replica keeps its
// counts: the agent's next load sends them, once each.
func TestAgentEvictedInAnOutageSendsItsCallsAtItsNextLoad(t *testing.T) {
	e := newFleetEnv(t, 0, nil, si.WithMaxAgents(1))
	link := &faultyFleet{Fleet: e.mem}
	a := e.addVia(link)
	e.add()
	e.call(1, "x", nil)
	e.sync()
	for range 3 {
		e.call(0, "x", nil)
	}
	link.down.Store(true)
	if err := a.SyncFleet(t.Context()); err == nil {
		t.Fatal("SyncFleet with the fleet down: nil error")
	}
	e.call(0, "y", nil) // evicts x, its 3 calls not booked by the fleet
	if m := a.Metrics(); m.Agents != 1 || m.Evictions != 1 {
		t.Fatalf("replica 0 in the outage: %d agents in memory, %d evicted; want 1 and 1", m.Agents, m.Evictions)
	}
	link.down.Store(false)
	e.sync()
	if got := e.pooled("x"); got != 1 {
		t.Fatalf("the fleet counts %d calls of x before its load, want 1 (test setup)", got)
	}
	e.call(0, "x", nil) // loaded again: sends the 3 calls with its own
	e.sync()
	e.clk.Advance(3 * time.Second)
	e.sync()
	e.wantFleetCalls("x", 5)
}

// TestMaxAgentsHoldsWhileCallsWaitForTheFleet: agents whose calls have
// not gone to the fleet stay in memory beyond WithMaxAgents by a quarter
// of it plus one at most; beyond, one is evicted all the same, and its
// next load sends its calls (until then, the fleet has not booked them).
func TestMaxAgentsHoldsWhileCallsWaitForTheFleet(t *testing.T) {
	e := newFleetEnv(t, 1, nil, si.WithMaxAgents(4))
	l := e.reps[0]
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("agent-", i)
		e.call(0, ids[i], nil) // not sent: no flush before SyncFleet
		// The cap, 4, and a quarter of it plus one.
		if m := l.Metrics(); m.Agents > 6 {
			t.Fatalf("after %d agents: %d in memory, want at most 6", i+1, m.Agents)
		}
	}
	e.sync()
	for _, id := range ids {
		e.call(0, id, nil) // an agent evicted above sends its first call too
		e.sync()
	}
	for _, id := range ids {
		if got := e.pooled(id); got != 2 {
			t.Errorf("the fleet counts %d calls of %s, want 2", got, id)
		}
	}
	if m := l.Metrics(); m.Agents > 4 {
		t.Errorf("after the sync: %d agents in memory, want at most 4", m.Agents)
	}
}

// wantFleetCalls checks that the fleet counts n calls of agent id, and
// that every replica's Stats shows the fleet's n.
func (e *fleetEnv) wantFleetCalls(id string, n int) {
	e.t.Helper()
	if got := e.pooled(id); got != int64(n) {
		e.t.Errorf("the fleet counts %d calls of %s, want %d", got, id, n)
	}
	for r, l := range e.reps {
		if got := l.Stats(id); got.Calls != n || got.TotalCalls != int64(n) {
			e.t.Errorf("replica %d: Stats %d calls (%d in all), want the fleet's %d", r, got.Calls, got.TotalCalls, n)
		}
	}
}
