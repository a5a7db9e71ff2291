package selfimprove_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetNoGhostOverInvalidState: while the fleet holds an invalid
// state of an agent (which the replica writes its own over), a decision
// whose commit fails (the fleet unreachable when it is tried, the
// replica backing off, or the commit refused) is taken back: in force
// nowhere, then or after the replica writes its state over the fleet's.
// Before, it stayed in the replica's copy, and landed with the rewrite,
// on every replica, although its caller had been told it failed (issue
// 28, item 2).
func TestFleetNoGhostOverInvalidState(t *testing.T) {
	for _, fault := range []string{"unreachable", "backing off", "refused"} {
		t.Run(fault, func(t *testing.T) {
			e := newFleetEnv(t, 0, nil)
			link := &refusingFleet{faultyFleet: faultyFleet{Fleet: e.mem}}
			e.fleet = link
			e.add()
			e.fleet = e.mem
			e.add()
			ctx := context.Background()
			if _, err := e.mem.Commit(ctx, "b", 0, []byte("{not a state")); err != nil {
				t.Fatal(err)
			}
			e.call(0, "b", nil)
			switch fault {
			case "unreachable":
				link.down.Store(true)
			case "backing off":
				link.down.Store(true)
				if err := e.reps[0].SyncFleet(ctx); err == nil {
					t.Fatal("SyncFleet succeeded with the fleet down")
				}
			case "refused":
				link.refuse.Store(true)
			}
			err := e.reps[0].SetConfig("b", si.Config{Route: "ghost"})
			if err == nil {
				t.Fatal("SetConfig succeeded with its commit failing")
			}
			if c := e.reps[0].Config("b"); c.Route == "ghost" {
				t.Fatalf("SetConfig returned %v, and its config is in force: %+v", err, c)
			}
			link.down.Store(false)
			link.refuse.Store(false)
			for range 3 {
				e.clk.Advance(2e9)
				e.sync()
			}
			for i, l := range e.reps {
				if c := l.Config("b"); c.Route == "ghost" {
					t.Fatalf("replica %d runs the failed SetConfig's config after the fleet came back: %+v", i, c)
				}
			}
			if rev, val, err := e.mem.Load(ctx, "b"); err != nil || rev < 2 || string(val) == "{not a state" {
				t.Fatalf("the invalid state was not replaced: revision %d, %v", rev, err)
			}
			// The next decision lands everywhere.
			if err := e.reps[0].SetConfig("b", si.Config{Route: "good"}); err != nil {
				t.Fatal(err)
			}
			e.sync()
			for i, l := range e.reps {
				if c := l.Config("b"); c.Route != "good" {
					t.Fatalf("replica %d runs %+v, want the route good", i, c)
				}
			}
		})
	}
}

// refusingFleet is a faultyFleet whose commits are refused (a missing
// right: no outage) while refuse is set.
type refusingFleet struct {
	faultyFleet
	refuse atomic.Bool
}

func (f *refusingFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	if f.refuse.Load() {
		return 0, errors.New("NOPERM this user has no permissions to run the 'evalsha' command")
	}
	return f.faultyFleet.Commit(ctx, id, rev, v)
}
