package redisfleet_test

import (
	"context"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestGettersFromFleet: a replica that never loaded an agent answers its
// getters from the fleet's state, at once after another replica's
// SetConfig returned (issue 28, item 5).
func TestGettersFromFleet(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 3)
	ctx := context.Background()
	// Replica 0 knows the agent; replicas 1 and 2 never load it.
	if _, err := ls[0].ExecuteWithImprovement(ctx, "getter", ok); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ls[0].SetConfig("getter", si.Config{Route: "r" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
		want := ls[0].Config("getter")
		for _, l := range ls[1:] {
			if got := l.Config("getter"); got.Version != want.Version || got.Route != want.Route {
				t.Fatalf("after SetConfig %d: a replica that never loaded the agent reports version %d route %q, want %d %q",
					i, got.Version, got.Route, want.Version, want.Route)
			}
			if h := l.History("getter"); len(h) != len(ls[0].History("getter")) {
				t.Fatalf("History: %d configs, want %d", len(h), len(ls[0].History("getter")))
			}
			if v, known := l.View("getter"); !known || v.Config.Version != want.Version || v.Loaded {
				t.Fatalf("View: known %v loaded %v version %d, want known, not loaded, %d", known, v.Loaded, v.Config.Version, want.Version)
			}
		}
	}
	if err := ls[0].SetThreshold("getter", si.Threshold{Failures: 7, Window: 60e9}); err != nil {
		t.Fatal(err)
	}
	if th, _ := ls[2].Threshold("getter"); th.Failures != 7 {
		t.Fatalf("Threshold on another replica: %+v, want Failures 7", th)
	}
	// The getters create no agent on the replicas that read them.
	for i, l := range ls[1:] {
		for id := range l.Views() {
			t.Fatalf("replica %d loaded agent %q by reading it", i+1, id.AgentID)
		}
	}
	// An agent the fleet does not know gets the documented answers.
	if c := ls[1].Config("nobody"); c.Version != ls[1].Config("nobody2").Version {
		t.Fatalf("unknown agents differ: %+v", c)
	}
	if _, known := ls[1].View("nobody"); known {
		t.Fatal("View of an agent nobody knows: known")
	}
}
