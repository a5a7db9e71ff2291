package selfimprove

import "testing"

// TestFleetMarkKeptOnlyWhenWhole: an evicted agent's bookkeeping is kept
// only when it holds all its statistics hold of the fleet (no delta in
// flight, none to send again, no count to start again), and at most as
// many as the agents in memory are kept.
func TestFleetMarkKeptOnlyWhenWhole(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*fleetAgent)
		want bool
	}{
		{"booked", func(*fleetAgent) {}, true},
		{"a delta in flight", func(fa *fleetAgent) { fa.flying = true }, false},
		{"a delta to send again", func(fa *fleetAgent) { fa.deltas.Answered(FleetDelta{}, true) }, false},
		{"the count to start again", func(fa *fleetAgent) { fa.rebase = true }, false},
	} {
		fa := &fleetAgent{sent: FleetCounts{Calls: 3}, others: FleetCounts{Calls: 4}, seq: 2}
		c.set(fa)
		if m, ok := fa.markLocked(); ok != c.want || m.sent.Calls != 3 || m.others.Calls != 4 || m.seq != 2 {
			t.Errorf("%s: mark %+v kept %v, want kept %v", c.name, m, ok, c.want)
		}
	}
	fl := &fleetLink{l: &Loop{maxAgents: 2}}
	for _, id := range []string{"a", "b", "c"} {
		fl.park(id, fleetMark{seq: 1})
	}
	if len(fl.parked) != 2 {
		t.Fatalf("%d marks kept, want at most 2 (the cap of agents in memory)", len(fl.parked))
	}
	fa := &fleetAgent{rebase: true}
	if m, ok := fl.unpark("c"); ok {
		fa.resume(m, 0)
	}
	if fa.rebase || fa.seq != 1 || len(fl.parked) != 1 {
		t.Fatalf("unpark: rebase %v seq %d, %d kept; want the mark taken and dropped", fa.rebase, fa.seq, len(fl.parked))
	}
	fresh := &fleetAgent{} // loaded with no calls: nothing to book from
	for id := range fl.parked {
		if m, ok := fl.unpark(id); ok {
			fresh.resume(m, 0)
		}
	}
	if fresh.seq != 0 || len(fl.parked) != 0 {
		t.Fatalf("unpark of an agent without calls took the mark (seq %d), %d kept", fresh.seq, len(fl.parked))
	}
}
