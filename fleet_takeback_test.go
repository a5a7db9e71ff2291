package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetTakenBackNotReported: two SetConfigs on one agent and
// replica, the second made while the first's commit is on its way to a
// fleet that does not answer it in time. The first's commit fails and
// its decision is taken back, with every unsaved decision of the agent:
// the second's too. The second must then either land (be in the fleet,
// in force on both replicas, its event in the fleet's log) and return
// nil, or fail with ErrFleetUnavailable and be in force nowhere, with no
// event. Before, the second found nothing left to commit and returned
// nil for a config that was never committed (issue 28, item 2).
func TestFleetTakenBackNotReported(t *testing.T) {
	for _, fault := range []string{"unanswered", "conflict"} {
		t.Run(fault, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { takenBack(t, fault) }) })
	}
}

// takenBack runs TestFleetTakenBackNotReported with the first commit's
// fault: "unanswered" (the fleet answers no commit within the timeout:
// the first fails with ErrFleetUnavailable), or "conflict" (replica 1
// committed unseen: the first's commit loses the race, and the replica
// takes replica 1's state; operator methods then try again).
func takenBack(t *testing.T, fault string) {
	const timeout = slowTimeout
	e, slow := slowEnv(t, 2, &countingStrategy{})
	if err := e.reps[0].SetConfig("a", si.Config{Route: "base"}); err != nil {
		t.Fatal(err)
	}
	e.sync()
	if fault == "conflict" {
		if err := e.reps[1].SetConfig("a", si.Config{Route: "r1"}); err != nil { // unseen by replica 0: no notification
			t.Fatal(err)
		}
		slow.delay.Store(int64(timeout * 3 / 10))
	} else {
		slow.delay.Store(int64(2 * timeout)) // no commit is answered in time
	}
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * timeout / 10) // the second while the first's commit is on its way
			errs[i] = e.reps[0].SetConfig("a", si.Config{Route: fmt.Sprint("q", i)})
		})
	}
	wg.Wait()
	slow.delay.Store(0)
	time.Sleep(timeout)
	e.clk.Advance(2 * time.Second) // the back-off is over
	e.sync()
	e.sync()
	if fault == "unanswered" && !errors.Is(errs[0], si.ErrFleetUnavailable) {
		t.Fatalf("the first SetConfig returned %v, want ErrFleetUnavailable", errs[0])
	}
	if fault == "conflict" && errs[0] != nil && errs[1] != nil {
		t.Fatalf("both SetConfigs failed (%v), want at least one to land on its try again", errs)
	}
	landed(t, e, errs[1], "q1")
}

// landed checks that the SetConfig of route, which returned err, either
// landed and was reported done, or did not land and was reported failed
// (ErrFleetUnavailable or ErrFleetConflict).
func landed(t *testing.T, e *fleetEnv, err error, route string) {
	t.Helper()
	evs, lerr := e.mem.Events(context.Background(), 100)
	if lerr != nil {
		t.Fatal(lerr)
	}
	logged := 0
	for _, ev := range evs {
		if ev.Type == si.EventConfigSet && ev.Change != nil && ev.Change.To.Route == route {
			logged++
		}
	}
	got := []string{e.reps[0].Config("a").Route, e.reps[1].Config("a").Route}
	switch {
	case err == nil:
		if got[0] != route || got[1] != route || logged != 1 {
			t.Fatalf("SetConfig(%q) returned nil, but the replicas run %q and the fleet's log holds %d of its events, want it in force on both and 1 event", route, got, logged)
		}
	case errors.Is(err, si.ErrFleetUnavailable) || errors.Is(err, si.ErrFleetConflict):
		if got[0] == route || got[1] == route || logged != 0 {
			t.Fatalf("SetConfig(%q) failed (%v), but the replicas run %q and the fleet's log holds %d of its events", route, err, got, logged)
		}
	default:
		t.Fatalf("SetConfig(%q) returned %v, want nil or a fleet error", route, err)
	}
}
