package selfimprove_test

import (
	"context"
	"sync/atomic"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// lossyFleet is a fleettest.Fleet whose Add, while lose is set, books the
// counts and then reports the fleet unreachable: the answer was lost.
type lossyFleet struct {
	faultyFleet
	lose atomic.Bool
}

func (f *lossyFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	p, err := f.faultyFleet.Add(ctx, d)
	if err == nil && f.lose.Load() {
		return nil, errUnreachable
	}
	return p, err
}

// pooled returns the fleet's count of id's calls.
func (e *fleetEnv) pooled(id string) int64 {
	e.t.Helper()
	p, err := e.mem.Add(context.Background(), []si.FleetDelta{{AgentID: id}})
	if err != nil {
		e.t.Fatal(err)
	}
	return p[0].Total.Calls
}

// TestFleetLostAnswerBookedOnce: counts whose answer was lost after the
// fleet booked them are sent again and booked once.
func TestFleetLostAnswerBookedOnce(t *testing.T) {
	e := newFleetEnv(t, 0, nil, noFloor)
	link := &lossyFleet{faultyFleet: faultyFleet{Fleet: e.mem}}
	e.fleet = link
	e.add()
	e.fleet = e.mem
	e.add()
	made := 0
	for range 10 {
		e.call(0, "a", nil)
		e.call(1, "a", errBoom)
		made += 2
	}
	e.sync()
	link.lose.Store(true)
	for range 3 {
		e.call(0, "a", nil)
		made++
		if err := e.reps[0].SyncFleet(context.Background()); err == nil {
			t.Fatal("SyncFleet succeeded with its answer lost")
		}
	}
	link.lose.Store(false)
	e.call(0, "a", nil)
	made++
	e.sync()
	e.sync()
	if got := e.pooled("a"); got != int64(made) {
		t.Fatalf("the fleet counts %d calls, %d were made", got, made)
	}
}

// TestFleetInvalidStateReplaced: a state in the fleet that does not decode
// is reported, and replaced by a replica's own at once; decisions go on.
func TestFleetInvalidStateReplaced(t *testing.T) {
	e := newFleetEnv(t, 2, nil, noFloor)
	if err := e.reps[0].SetConfig("a", si.Config{Route: "one"}); err != nil {
		t.Fatal(err)
	}
	e.call(1, "a", nil)
	e.sync()
	ctx := context.Background()
	rev, _, err := e.mem.Load(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Commit(ctx, "a", rev, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	e.sync()
	e.sync()
	if _, val, _ := e.mem.Load(ctx, "a"); string(val) == "{not json" {
		t.Fatal("the invalid state is still in the fleet after two flushes")
	}
	for i := range 2 {
		if err := e.reps[i].SetConfig("a", si.Config{Route: "two"}); err != nil {
			t.Fatalf("replica %d: SetConfig after an invalid state: %v", i, err)
		}
	}
	e.sync()
	v := e.reps[1].Config("a").Version
	e.wantVersions("a", v)
	if m := e.reps[0].Metrics(); m.FleetErrors == 0 {
		t.Fatalf("metrics %+v count no fleet error", m)
	}
}
