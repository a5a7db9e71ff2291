package selfimprove

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// TestTallyPriorOnlyInTotals: the calls of other generations than the
// agent's, its control arm's among them and those of a generation a
// take-back undid, go in a delta at generation 0, which no change is
// verified under (a change's install makes the generation at least 1):
// the fleet books them in its totals only. Before, they went at the
// earliest generation's number, in the change arm: a fleet still at that
// generation booked the control arm's calls into its verification
// (review of 8bdbe75).
func TestTallyPriorOnlyInTotals(t *testing.T) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	call4 := func(arm Arm, failed bool) *call {
		return &call{gen: 4, arm: arm, failed: failed, dur: time.Millisecond, end: end, text: "boom"}
	}
	var tl fleetTally
	tl.count(call4(ArmChange, false), 4)
	tl.count(call4(ArmChange, false), 4)
	for range 3 {
		tl.count(call4(ArmControl, true), 4)
	}
	tl.count(&call{gen: 5, dur: time.Millisecond, end: end}, 5) // a local decision made generation 5
	tl.count(call4(ArmChange, false), 5)                        // a call that started under 4
	tl.moveTo(4)                                                // its commit failed: taken back to 4
	if !tl.hasPrior() {
		t.Fatal("no calls of other generations kept")
	}
	d := tl.takePrior("a", "r")
	if d.Gen != 0 || d.Change.Calls != 7 || d.Change.Failures != 3 || d.Control != (FleetCounts{}) || len(d.Failures) != 3 {
		t.Fatalf("prior delta: gen %d, change %+v, control %+v, %d failures; want gen 0 and 7 calls, 3 failed, in the totals",
			d.Gen, d.Change, d.Control, len(d.Failures))
	}
	if tl.gen != 4 || tl.change != (FleetCounts{}) || tl.control != (FleetCounts{}) || tl.hasPrior() {
		t.Fatalf("tally after: gen %d, change %+v, control %+v", tl.gen, tl.change, tl.control)
	}
}

// TestOrphanDecisionLanded: a decision whose commit's answer was lost is
// recorded when a state of the fleet's holds it: an apply by its change,
// whatever became of it since; a confirmation only as this replica made
// it, not another replica's confirmation of the same change.
func TestOrphanDecisionLanded(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orphan := func(ch Change) *replica.Orphan {
		return &replica.Orphan{Value: []byte("tried"), Payload: []queued{{ev: &Event{Change: &ch}}}}
	}
	a := &agent{}
	applied := Change{ID: "c1", State: ChangeVerifying}
	mine := Change{ID: "c1", State: ChangeConfirmed, DecidedAt: at}
	theirs := Change{ID: "c1", State: ChangeConfirmed, DecidedAt: at.Add(time.Millisecond)}
	for _, tc := range []struct {
		name   string
		o      Change
		fleet  Change
		landed bool
	}{
		{"an apply, confirmed since by another replica", applied, mine, true},
		{"a confirmation, the same", mine, mine, true},
		{"a confirmation, another replica's", mine, theirs, false},
		{"a rollback, the change confirmed by another replica", Change{ID: "c1", State: ChangeRolledBack, DecidedAt: at}, mine, false},
	} {
		got := a.landedLocked(orphan(tc.o), []byte("fleet's"), []Change{tc.fleet}, nil) != nil
		if got != tc.landed {
			t.Errorf("%s: recorded %v, want %v", tc.name, got, tc.landed)
		}
	}
}

// TestFleetStateNotTakenIntoEvicted: a state of the fleet's to take is
// given to an agent still live only (fleetLink.give, lockLive): an agent
// evicted meanwhile is its successor's to load, and taking the state
// into it would take back decisions its save still carries. The other
// answers of the fleet's go to the agent as it is (lockThis).
func TestFleetStateNotTakenIntoEvicted(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		l, err := New(WithStore(NewRAMStore()), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error { return nil })
		v, _ := l.agents.Load("a")
		a := v.(*agent)
		// The agent's link to a fleet whose client never runs: taking a
		// state asks nothing of the fleet.
		l.fleet = newFleetLink(l, &options{fleetTimeout: time.Second})
		a.mu.Lock()
		a.fl = &fleetAgent{}
		base, _ := encodeShared(&a.s)
		a.fl.st.Took(base)
		a.evicted = evicted
		a.mu.Unlock()
		newer := newState("a", Config{Version: 7, Timeout: time.Minute})
		val, err := encodeShared(&newer)
		if err != nil {
			t.Fatal(err)
		}
		l.fleet.adopt(a, replica.Adopt{Rev: 5, Value: val}, errTakenOver)
		a.mu.Lock()
		taken := a.s.Config.Version == 7 && a.fl.st.Rev == 5
		a.mu.Unlock()
		if taken == evicted {
			t.Errorf("evicted %v: the fleet's state taken %v, want %v", evicted, taken, !evicted)
		}
		l.fleet = nil // never started: Close has no flusher to stop
		l.Close()
	}
}
