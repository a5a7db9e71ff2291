package selfimprove_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
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

// replicaNotes counts the replica notes sent to a fleet.
type replicaNotes struct {
	*fleettest.Fleet
	n atomic.Int64
}

func (f *replicaNotes) Note(ctx context.Context, kind, name, reason string, until, now time.Time) (bool, error) {
	if kind == "replica" {
		f.n.Add(1)
	}
	return f.Fleet.Note(ctx, kind, name, reason, until, now)
}

// TestFleetReplicasCadence: with the default flush (every 200 ms), each
// replica notes itself every 5 s, not at every flush, and sees the other
// within 5 s; a closed one is gone within 5 s.
func TestFleetReplicasCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &replicaNotes{Fleet: fleettest.New(nil)}
		var ls []*si.Loop
		for range 2 {
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(nil), si.WithFleet(f))
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		defer ls[0].Close()
		time.Sleep(5100 * time.Millisecond) // flushes at 0.2 s (a note each), 0.4 s, ..., 5.2 s (the next)
		if n := f.n.Load(); n != 2 {
			t.Errorf("%d replica notes in 5.1 s of flushes every 200 ms, want 2 (one each)", n)
		}
		time.Sleep(200 * time.Millisecond)
		for i, l := range ls {
			if n := l.Metrics().FleetReplicas; n != 2 {
				t.Errorf("replica %d sees %d replicas after 5.3 s, want 2", i, n)
			}
		}
		if err := ls[1].Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if got := ls[0].FleetReplicas(); len(got) != 1 {
			t.Errorf("replica 0 sees %v 5 s after replica 1 closed, want itself alone", got)
		}
		if n := f.n.Load(); n != 6 {
			t.Errorf("%d replica notes, want 6: 2 at 0.2 s and at 5.2 s, 1 at 10.2 s, and replica 1's end at Close", n)
		}
	})
}
