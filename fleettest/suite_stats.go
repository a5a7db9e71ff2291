package fleettest

import (
	"context"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// testStats checks that the fleet keeps the statistics of the delta it
// booked last, for every handle, per agent: a delta without statistics
// leaves them, a batch sent again does not bring back older ones, and an
// agent with none has nil.
func testStats(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	load := func(h si.Fleet, id string) string {
		t.Helper()
		b, err := h.LoadStats(ctx, id)
		if err != nil {
			t.Fatalf("LoadStats(%q): %v", id, err)
		}
		if b == nil {
			return "<nil>"
		}
		return string(b)
	}
	if got := load(f, "a"); got != "<nil>" {
		t.Fatalf("LoadStats of an unknown agent: %q, want nil", got)
	}
	one := si.FleetDelta{AgentID: "a", Replica: "r1", Gen: 1, Batch: 1, Change: si.FleetCounts{Calls: 1}, Stats: []byte("one")}
	two := si.FleetDelta{AgentID: "a", Replica: "r2", Gen: 1, Batch: 1, Change: si.FleetCounts{Calls: 1}, Stats: []byte("two")}
	for _, d := range []si.FleetDelta{one, two} {
		if _, err := f.Add(ctx, []si.FleetDelta{d}); err != nil {
			t.Fatal(err)
		}
	}
	if got := load(g, "a"); got != "two" {
		t.Fatalf("LoadStats through the other handle: %q, want the last booked, two", got)
	}
	if _, err := g.Add(ctx, []si.FleetDelta{one, {AgentID: "a", Replica: "r2", Gen: 1, Batch: 2, Change: si.FleetCounts{Calls: 1}}}); err != nil {
		t.Fatal(err)
	}
	if got := load(f, "a"); got != "two" {
		t.Fatalf("after a batch sent again and a delta without statistics: %q, want two", got)
	}
	if got := load(f, "b"); got != "<nil>" {
		t.Fatalf("LoadStats of another agent: %q, want nil", got)
	}
}
