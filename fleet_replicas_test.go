package selfimprove_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// seen returns the replicas replica r sees, by index in names, and
// checks Metrics.FleetReplicas against them and their last-seen times.
func (e *fleetEnv) seen(r int, names []string) string {
	e.t.Helper()
	got := e.reps[r].FleetReplicas()
	var idx []int
	for i, name := range names {
		at, ok := got[name]
		if !ok {
			continue
		}
		if d := e.clk.Now().Sub(at); d < 0 || d > 20*time.Second {
			e.t.Fatalf("replica %d sees %d last seen %v ago", r, i, d)
		}
		idx = append(idx, i)
	}
	if len(idx) != len(got) || int64(len(got)) != e.reps[r].Metrics().FleetReplicas {
		e.t.Fatalf("replica %d sees %v, Metrics.FleetReplicas %d", r, got, e.reps[r].Metrics().FleetReplicas)
	}
	slices.Sort(idx)
	return fmt.Sprint(idx)
}

// TestFleetReplicasSeen checks that every replica sees the replicas of its
// fleet, that a closed one drops out at once, and one that stops (died
// without Close) once its note has ended, 20 s after it was last seen.
func TestFleetReplicasSeen(t *testing.T) {
	e := newFleetEnv(t, 4, nil)
	var names []string
	for _, l := range e.reps {
		names = append(names, l.Metrics().FleetReplica)
	}
	e.sync()
	e.clk.Advance(5 * time.Second)
	e.sync()
	for r := range e.reps {
		if got := e.seen(r, names); got != "[0 1 2 3]" {
			t.Fatalf("replica %d sees %s, want all 4", r, got)
		}
	}
	if err := e.reps[3].Close(); err != nil {
		t.Fatal(err)
	}
	live := e.reps[:3]
	e.clk.Advance(5 * time.Second)
	e.reps = live
	e.sync()
	if got := e.seen(0, names); got != "[0 1 2]" {
		t.Fatalf("replica 0 sees %s after replica 3 closed, want [0 1 2]", got)
	}
	// Replica 2 stops: it is seen until its note ends.
	e.reps = live[:2]
	for range 3 {
		e.clk.Advance(5 * time.Second)
		e.sync()
		if got := e.seen(1, names); got != "[0 1 2]" {
			t.Fatalf("replica 1 sees %s %v after replica 2 stopped, want it still", got, e.clk.Now().Sub(t0))
		}
	}
	e.clk.Advance(5 * time.Second)
	e.sync()
	for r := range 2 {
		if got := e.seen(r, names); got != "[0 1]" {
			t.Fatalf("replica %d sees %s 20 s after replica 2 stopped, want [0 1]", r, got)
		}
	}
}
