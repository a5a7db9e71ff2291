package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// deafFleetOf is a fleet that announces no commit to the replica that
// reaches it: that replica learns another's decision only by asking.
type deafFleetOf struct{ *fleettest.Fleet }

func (deafFleetOf) Subscribe(func(string, uint64)) func() { return func() {} }

// TestFleetMemoryOfRacedRollback: two replicas roll back the same change
// at once; the one whose commit loses takes the winner's state, and its
// failure memory learns the rolled-back fix all the same. Before the fix
// the loser built the list of changes it knew from its own state, which
// already held its decision, so it skipped the fix, and decided skipped
// it too, its save having failed (CI, stop 50: TestFleetProcesses,
// "replica2's failure memory has no rolled-back fix for the fault").
// It runs in a synctest bubble with the flushers manual: replica 1
// learns of replica 0's rollback only when the script says.
func TestFleetMemoryOfRacedRollback(t *testing.T) {
	synctest.Test(t, racedRollback)
}

func racedRollback(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	e := newFleetEnv(t, 1, strat)
	e.addVia(deafFleetOf{e.mem})
	for _, l := range e.reps {
		si.TestingManualFlush(l)
	}
	if err := e.reps[0].SetThreshold("a", manual(5)); err != nil {
		t.Fatal(err)
	}
	i := 0
	for ; i < 30; i++ {
		e.call(i%2, "a", nil)
		e.sync()
	}
	for e.reps[0].Config("a").Version == 1 || e.reps[1].Config("a").Version == 1 {
		if i > 100 {
			t.Fatal("no tweak applied")
		}
		e.call(i%2, "a", errBoom)
		e.sync()
		i++
	}
	// Under the tweak: calls on both, each replica synced after its own
	// call, until replica 0 rolls back; replica 1, deaf, has not seen it.
	for e.reps[0].Config("a").Version == 2 {
		if i > 300 {
			t.Fatal("not rolled back")
		}
		e.call(i%2, "a", errBoom)
		if err := e.reps[i%2].SyncFleet(context.Background()); err != nil {
			t.Fatal(err)
		}
		i++
	}
	synctest.Wait()
	if v := e.reps[1].Config("a").Version; v != 2 {
		t.Fatalf("replica 1 runs version %d before its own decision, want 2", v)
	}
	// Replica 1 decides the rollback on its own calls: its commit loses.
	lost := false
	for n := 0; e.reps[1].Config("a").Version == 2; n++ {
		if n > 50 {
			t.Fatal("replica 1 did not roll back")
		}
		rep := e.call(1, "a", errBoom)
		lost = lost || errors.Is(rep.LoopErr, si.ErrFleetConflict)
	}
	synctest.Wait()
	if !lost {
		t.Fatal("replica 1's rollback did not lose to replica 0's: the race is not played")
	}
	for r, l := range e.reps {
		if !rolledBackInMemory(l, "boom") {
			t.Fatalf("replica %d's memory has no rolled-back fix for the fault: %+v", r, l.Similar("boom", 3))
		}
	}
	if n := e.reps[0].Metrics().Rollbacks + e.reps[1].Metrics().Rollbacks; n != 1 {
		t.Fatalf("%d rollbacks counted, want 1", n)
	}
}

// TestFleetMemoryOfDecisionBeforeFault: a replica takes the fleet's
// rollback of a fix for a fault it has not seen yet (its memory learns
// outcomes only of faults it knows); once the fault reaches it, its
// memory holds the rolled-back fix. Before the fix it never learned it
// (TestFleetSchedules, seed 85).
func TestFleetMemoryOfDecisionBeforeFault(t *testing.T) {
	synctest.Test(t, decisionBeforeFault)
}

func decisionBeforeFault(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	e := newFleetEnv(t, 2, strat)
	for _, l := range e.reps {
		si.TestingManualFlush(l) // no flush brings replica 1 the failures
	}
	if err := e.reps[0].SetThreshold("a", manual(5)); err != nil {
		t.Fatal(err)
	}
	e.call(1, "a", nil) // replica 1 runs the agent, and sees no failure
	for i := 0; i < 30; i++ {
		e.call(0, "a", nil)
	}
	for i := 0; e.reps[0].Config("a").Version == 1; i++ {
		if i > 100 {
			t.Fatal("no tweak applied")
		}
		e.call(0, "a", errBoom)
	}
	for i := 0; e.reps[0].Config("a").Version == 2; i++ {
		if i > 200 {
			t.Fatal("not rolled back")
		}
		e.call(0, "a", errBoom)
	}
	// Replica 1 takes the rollback from the fleet's notification, without
	// the failures (they come with the pooled counts of a sync).
	synctest.Wait()
	if v := e.reps[1].Config("a").Version; v != 1 || e.reps[1].Changes("a")[0].State != si.ChangeRolledBack {
		t.Fatalf("replica 1 runs version %d, changes %v", v, e.reps[1].Changes("a"))
	}
	if len(e.reps[1].Similar("boom", 1)) != 0 {
		t.Fatal("replica 1's memory knows the fault before it saw it")
	}
	e.call(1, "a", errBoom)
	synctest.Wait()
	if !rolledBackInMemory(e.reps[1], "boom") {
		t.Fatalf("replica 1's memory has no rolled-back fix for the fault: %+v", e.reps[1].Similar("boom", 1))
	}
}
