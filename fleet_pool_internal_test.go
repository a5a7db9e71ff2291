package selfimprove

import "testing"

// TestFleetMarkKeptOnlyWhenWhole: an evicted agent's bookkeeping is kept
// when it holds all its statistics hold of the fleet (no delta in flight,
// no count to start again; a delta to send again goes with it), or counts
// the fleet has not booked, and at most as many as the agents in memory
// are kept.
func TestFleetMarkKeptOnlyWhenWhole(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*fleetAgent)
		want bool
	}{
		{"booked", func(*fleetAgent) {}, true},
		{"a delta in flight", func(fa *fleetAgent) { fa.flying = true }, false},
		{"a delta to send again", func(fa *fleetAgent) { fa.deltas.Answered(FleetDelta{Change: FleetCounts{Calls: 1}}, true) }, true},
		{"the count to start again", func(fa *fleetAgent) { fa.rebase = true }, false},
		{"the count to start again, calls not sent", func(fa *fleetAgent) { fa.rebase = true; fa.tally.calls = 1 }, true},
	} {
		fa := &fleetAgent{sent: FleetCounts{Calls: 3}, others: FleetCounts{Calls: 4}, seq: 2}
		c.set(fa)
		if m, ok := fa.markLocked(); ok != c.want || m.sent.Calls != 3 || m.others.Calls != 4 || m.seq != 2 {
			t.Errorf("%s: mark %+v kept %v, want kept %v", c.name, m, ok, c.want)
		}
	}
	fl := &fleetLink{l: &Loop{maxAgents: 2}}
	for _, id := range []string{"a", "b", "c"} {
		fl.park(id, fleetMark{seq: 1, booked: true})
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
	// Counts the fleet had not booked go to the next link, to send; a
	// mark not booked leaves its count to start again.
	unsent := &fleetAgent{rebase: true}
	unsent.resume(fleetMark{seq: 5, tally: fleetTally{calls: 2}, pending: &FleetDelta{Batch: 7}}, 0)
	if d := unsent.deltas.Pending(); unsent.tally.calls != 2 || d == nil || d.Batch != 7 || !unsent.rebase || unsent.seq != 0 {
		t.Fatalf("resume of unsent counts: tally %d calls, pending %+v, rebase %v, seq %d", unsent.tally.calls, d, unsent.rebase, unsent.seq)
	}
}
