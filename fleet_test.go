package selfimprove_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// fleetEnv is n Loops (replicas) sharing one MemoryFleet and a fake
// clock, each on its own memory store. Counts go to the fleet only on
// sync, so that every step is deterministic.
type fleetEnv struct {
	t     *testing.T
	clk   *fakeclock.Clock
	fleet si.Fleet
	mem   *si.MemoryFleet
	reps  []*si.Loop
	recs  []*recorder
	strat si.Strategy
	opts  []si.Option
}

func newFleetEnv(t *testing.T, n int, strat si.Strategy, opts ...si.Option) *fleetEnv {
	t.Helper()
	clk := fakeclock.New(t0)
	mem := si.NewMemoryFleetClock(clk)
	e := &fleetEnv{t: t, clk: clk, fleet: mem, mem: mem, strat: strat, opts: opts}
	for range n {
		e.add()
	}
	return e
}

// add starts one more replica, with an empty store.
func (e *fleetEnv) add() *si.Loop {
	e.t.Helper()
	rec := &recorder{}
	base := []si.Option{si.WithMemoryStore(), si.WithClock(e.clk), si.WithNotifier(rec), si.WithLogger(quiet),
		si.WithStrategy(e.strat), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}),
		si.WithFleet(e.fleet), si.WithFleetFlush(0, 1<<30)}
	l, err := si.New(append(base, e.opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close() })
	e.reps = append(e.reps, l)
	e.recs = append(e.recs, rec)
	return l
}

// call makes one call of id on replica r.
func (e *fleetEnv) call(r int, id string, err error) si.Report {
	e.t.Helper()
	rep, got := e.reps[r].ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
		e.clk.Advance(10 * time.Millisecond)
		return err
	})
	if !errors.Is(got, err) {
		e.t.Fatalf("replica %d: ExecuteWithImprovement returned %v, want fn's error %v", r, got, err)
	}
	return rep
}

// sync syncs every replica with the fleet.
func (e *fleetEnv) sync() {
	e.t.Helper()
	for i, l := range e.reps {
		if err := l.SyncFleet(context.Background()); err != nil {
			e.t.Fatalf("replica %d: SyncFleet: %v", i, err)
		}
	}
}

// versions returns the config version each replica runs for id.
func (e *fleetEnv) versions(id string) []int {
	var out []int
	for _, l := range e.reps {
		out = append(out, l.Config(id).Version)
	}
	return out
}

func (e *fleetEnv) wantVersions(id string, v int) {
	e.t.Helper()
	for i, got := range e.versions(id) {
		if got != v {
			e.t.Fatalf("replica %d runs version %d of %q, want %d (all: %v)", i, got, id, v, e.versions(id))
		}
	}
}

func manual(n int) si.Threshold {
	return si.Threshold{Failures: n, Window: time.Minute, Cooldown: time.Minute}
}

func TestFleetOneConfigFleetWide(t *testing.T) {
	e := newFleetEnv(t, 3, nil)
	const id = "writer"
	for r := range 3 {
		e.call(r, id, nil)
	}
	if err := e.reps[0].SetConfig(id, si.Config{Route: "fast", MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	// Synchronous: in force on every replica's next call, one version.
	for r := range 3 {
		if rep := e.call(r, id, nil); rep.ConfigVersion != 2 {
			t.Fatalf("replica %d ran version %d after SetConfig, want 2", r, rep.ConfigVersion)
		}
		if c := e.reps[r].Config(id); c.Route != "fast" || c.MaxAttempts != 2 {
			t.Fatalf("replica %d runs %+v", r, c)
		}
	}
	// Another replica's setting moves the version on, never back.
	if err := e.reps[2].SetConfig(id, si.Config{Route: "slow"}); err != nil {
		t.Fatal(err)
	}
	e.wantVersions(id, 3)
	if err := e.reps[1].SetThreshold(id, manual(7)); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		if th, prof := e.reps[r].Threshold(id); th != manual(7) || prof != si.ProfileManual {
			t.Fatalf("replica %d: threshold %+v (%v), want the one set on replica 1", r, th, prof)
		}
	}
	// Rewind from the third replica: one new version everywhere.
	if _, err := e.reps[0].Rewind(id, 2, "back"); err != nil {
		t.Fatal(err)
	}
	e.wantVersions(id, 4)
	if c := e.reps[1].Config(id); c.Route != "fast" {
		t.Fatalf("replica 1 after the rewind runs %+v", c)
	}
}

// countingStrategy proposes one tweak per run and counts the runs.
type countingStrategy struct {
	runs  atomic.Int64
	tweak si.Config
	gate  chan struct{} // when set, each run waits for it
}

func (s *countingStrategy) Analyze(ctx context.Context, a si.Analysis) (*si.Tweak, error) {
	s.runs.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &si.Tweak{Config: s.tweak, Reason: "route around the fault"}, nil
}

func TestFleetOneStrategyRunPerTrigger(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	e := newFleetEnv(t, 3, strat)
	const id = "planner"
	if err := e.reps[0].SetThreshold(id, manual(4)); err != nil {
		t.Fatal(err)
	}
	// Each replica sees one failure; pooled, the fleet has three.
	for r := range 3 {
		e.call(r, id, errBoom)
	}
	e.sync()
	e.sync() // every replica has booked the others' failures
	for r := range 3 {
		if st := e.reps[r].Stats(id); st.Failures != 3 {
			t.Fatalf("replica %d sees %d failures in its window, want the fleet's 3", r, st.Failures)
		}
	}
	// All three cross the pooled threshold at once, racing.
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			e.reps[r].ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return errBoom })
		})
	}
	wg.Wait()
	if n := strat.runs.Load(); n != 1 {
		t.Fatalf("the strategy ran %d times for one trigger, want 1", n)
	}
	e.wantVersions(id, 2)
}

