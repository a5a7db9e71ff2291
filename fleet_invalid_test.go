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
			e.addVia(link)
			e.add()
			ctx := context.Background()
			if _, err := e.mem.Commit(ctx, "b", 0, []byte("{not a state")); err != nil {
				t.Fatal(err)
			}
			// The replica's own rewrite of the invalid state (the flusher
			// is kicked at once) is refused until the fault is set.
			link.refuse.Store(true)
			e.call(0, "b", nil)
			switch fault {
			case "unreachable":
				link.down.Store(true)
				link.refuse.Store(false)
			case "backing off":
				link.down.Store(true)
				link.refuse.Store(false)
				if err := e.reps[0].SyncFleet(ctx); err == nil {
					t.Fatal("SyncFleet succeeded with the fleet down")
				}
			}
			if _, val, _ := e.mem.Load(ctx, "b"); string(val) != "{not a state" {
				t.Fatalf("the fleet's state is %q before the SetConfig, want the invalid one", val)
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

// TestFleetWinnerOverInvalidKept: two replicas find the fleet's state of
// an agent invalid; one writes its own over it and then decides; the
// other, which missed the notifications, decides on its stale copy: its
// commit loses, it takes the winner's state, and its own decision is
// made again on it. The winner's decision stays. Before, the loser took
// its stale copy back over the winner's state (it still meant to write
// over an invalid one) and wrote it: the winner's route was gone on both
// replicas. Under -race it also caught a save whose snapshot, taken
// before a flush took the winner's state, was committed at the winner's
// revision (14 of 300 runs; persist.go reads the revision with the
// snapshot now).
func TestFleetWinnerOverInvalidKept(t *testing.T) {
	e := newFleetEnv(t, 0, nil)
	deaf := &deafRefusingFleet{refusingFleet: refusingFleet{faultyFleet: faultyFleet{Fleet: e.mem}}}
	e.addVia(deaf)
	e.add()
	ctx := context.Background()
	if _, err := e.mem.Commit(ctx, "c", 0, []byte("{not a state")); err != nil {
		t.Fatal(err)
	}
	deaf.refuse.Store(true) // replica 0 does not write over it yet
	e.call(0, "c", nil)
	e.call(1, "c", nil)
	if err := e.reps[1].SyncFleet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.reps[1].SetConfig("c", si.Config{Route: "winner"}); err != nil {
		t.Fatal(err)
	}
	deaf.refuse.Store(false)
	if err := e.reps[0].SetThreshold("c", manual(7)); err != nil {
		t.Fatal(err)
	}
	e.sync()
	for i, l := range e.reps {
		if c := l.Config("c"); c.Route != "winner" {
			t.Fatalf("replica %d runs %+v, want the winner's route", i, c)
		}
		if th, _ := l.Threshold("c"); th.Failures != 7 {
			t.Fatalf("replica %d: threshold %+v, want the loser's, made again on the winner's state", i, th)
		}
	}
}

// deafRefusingFleet is a refusingFleet whose notifications are lost:
// its replica finds other replicas' commits by its own reads only.
type deafRefusingFleet struct{ refusingFleet }

func (f *deafRefusingFleet) Subscribe(func(string, uint64)) (stop func()) { return func() {} }

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

// TestFleetStrategyConflictOverInvalid: a strategy's change whose commit
// loses to another invalid state written meanwhile (the fleet's state is
// invalid before and after) is either reported made and in force on
// every replica, or not reported and in force nowhere. Before the fix,
// the conflict's refresh found the state invalid, the change stayed in
// the replica's copy unreported, and landed with the replica's rewrite.
func TestFleetStrategyConflictOverInvalid(t *testing.T) {
	e := newFleetEnv(t, 0, nil)
	ctx := context.Background()
	e.strat = &hookStrategy{tweak: si.Config{Route: "t"}, before: func() {
		// Another invalid state, committed while the strategy runs. The
		// analysis runs beside the test's next call, whose commit (the
		// replica's rewrite of the invalid state) may come between this
		// load and this commit: load again then (CI once saw "at revision
		// 3, not 2" here).
		for range 10 {
			rev, _, _ := e.mem.Load(ctx, "d")
			_, err := e.mem.Commit(ctx, "d", rev, []byte("{still not a state"))
			if !errors.Is(err, si.ErrFleetConflict) {
				if err != nil {
					t.Error(err)
				}
				return
			}
		}
		t.Error("the invalid state lost 10 commits in a row")
	}}
	deaf := &deafRefusingFleet{refusingFleet: refusingFleet{faultyFleet: faultyFleet{Fleet: e.mem}}}
	e.addVia(deaf)
	e.add()
	if err := e.reps[0].SetThreshold("d", manual(2)); err != nil {
		t.Fatal(err)
	}
	// An invalid state over it, which replica 0 is not told of.
	rev, _, _ := e.mem.Load(ctx, "d")
	if _, err := e.mem.Commit(ctx, "d", rev, []byte("{not a state")); err != nil {
		t.Fatal(err)
	}
	var made *si.Change
	for i := 0; i < 10 && made == nil; i++ {
		made = e.call(0, "d", errBoom).Improvement
	}
	if e.strat.(*hookStrategy).runs == 0 {
		t.Fatal("the strategy never ran")
	}
	e.clk.Advance(3e9)
	e.sync()
	e.sync()
	for i, l := range e.reps {
		inForce := l.Config("d").Route == "t"
		if inForce != (made != nil) {
			t.Fatalf("replica %d: the change in force %v, reported made %v", i, inForce, made != nil)
		}
	}
}

// hookStrategy proposes tweak, after calling before.
type hookStrategy struct {
	tweak  si.Config
	before func()
	runs   int
}

func (s *hookStrategy) Analyze(ctx context.Context, a si.Analysis) (*si.Tweak, error) {
	s.runs++
	s.before()
	return &si.Tweak{Config: s.tweak, Reason: "route around the fault"}, nil
}
