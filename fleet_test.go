package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// fleetEnv is n Loops (replicas) sharing one fleettest.Fleet and a fake
// clock, each on its own memory store. Counts go to the fleet only on
// sync, so that every step is deterministic.
type fleetEnv struct {
	t     *testing.T
	clk   *fakeclock.Clock
	fleet si.Fleet
	mem   *fleettest.Fleet
	reps  []*si.Loop
	recs  []*recorder
	strat si.Strategy
	opts  []si.Option
}

func newFleetEnv(t *testing.T, n int, strat si.Strategy, opts ...si.Option) *fleetEnv {
	t.Helper()
	clk := fakeclock.New(t0)
	mem := fleettest.New(clk)
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
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(e.clk), si.WithNotifier(rec), si.WithLogger(quiet),
		si.WithStrategy(e.strat), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}),
		si.WithFleet(e.fleet), si.WithFleetFlush(0, 1<<30),
		// The fleet time is real time: on a loaded machine (200 runs
		// beside other builds) the default 500 ms was spent before a
		// getter's read of the statistics, which was skipped
		// (TestFleetStatsInvalid: "FleetErrors 2, want 3"). The fleet's
		// timeouts are tested on a bubble's clock (slowEnv, synctest);
		// here the timeout is a hang guard.
		si.WithFleetTimeout(time.Minute)}
	l, err := si.New(append(base, e.opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close() })
	e.reps = append(e.reps, l)
	e.recs = append(e.recs, rec)
	return l
}

// addVia starts one more replica that reaches the fleet through link
// (a wrapper of e.mem); the replicas added after it reach e.mem.
func (e *fleetEnv) addVia(link si.Fleet) *si.Loop {
	e.t.Helper()
	e.fleet = link
	defer func() { e.fleet = e.mem }()
	return e.add()
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

// harmfulTweak runs the scenario of a harmful change on n replicas: an
// agent with a manual threshold works, then fails until a tweak is
// applied, and the tweak fails every call. Calls go round the replicas,
// each followed by a sync. It returns the calls made under the tweak
// until it was rolled back everywhere.
func harmfulTweak(t *testing.T, e *fleetEnv, id string) int {
	t.Helper()
	n := len(e.reps)
	if err := e.reps[0].SetThreshold(id, manual(5)); err != nil {
		t.Fatal(err)
	}
	i := 0
	for ; i < 30; i++ {
		e.call(i%n, id, nil)
		e.sync()
	}
	for e.reps[0].Config(id).Version == 1 {
		if i > 100 {
			t.Fatal("no tweak applied after 70 failures")
		}
		e.call(i%n, id, errBoom)
		e.sync()
		i++
	}
	e.wantVersions(id, 2)
	calls := 0
	for e.reps[0].Config(id).Version == 2 {
		if calls > 200 {
			t.Fatal("the harmful tweak was not rolled back after 200 calls")
		}
		e.call(i%n, id, errBoom)
		e.sync()
		i++
		calls++
	}
	e.wantVersions(id, 1)
	return calls
}

func TestFleetPooledVerification(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	one := harmfulTweak(t, newFleetEnv(t, 1, strat), "a")
	strat3 := &countingStrategy{tweak: si.Config{Route: "backup"}}
	e := newFleetEnv(t, 3, strat3)
	three := harmfulTweak(t, e, "a")
	t.Logf("calls under the harmful tweak until its rollback: %d on one replica, %d over three", one, three)
	if three > one+1 {
		t.Fatalf("three replicas rolled back after %d calls, one after %d: verification is not pooled", three, one)
	}
	// Decided once: one rollback in the fleet, the same record everywhere.
	var rollbacks int64
	for r, l := range e.reps {
		rollbacks += l.Metrics().Rollbacks
		chs := l.Changes("a")
		if len(chs) != 1 || chs[0].State != si.ChangeRolledBack || chs[0].ID != e.reps[0].Changes("a")[0].ID {
			t.Fatalf("replica %d's changes: %+v", r, chs)
		}
	}
	if rollbacks != 1 {
		t.Fatalf("%d rollbacks counted over the replicas, want 1", rollbacks)
	}
	evs, err := e.mem.Events(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []si.EventType
	for _, ev := range evs {
		kinds = append(kinds, ev.Type)
	}
	want := []si.EventType{si.EventThresholdSet, si.EventImprovementApplied, si.EventRolledBack}
	if !slices.Equal(kinds, want) {
		t.Fatalf("fleet events %v, want %v", kinds, want)
	}
}

func TestFleetSharedLearning(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	e := newFleetEnv(t, 3, strat)
	harmfulTweak(t, e, "a")
	// Past the cooldown the strategy proposes the same tweak again, on
	// whichever replica: refused everywhere.
	e.clk.Advance(2 * time.Minute)
	for i := 0; i < 30; i++ {
		e.call(i%3, "a", errBoom)
		e.sync()
	}
	e.wantVersions("a", 1)
	var refused int64
	for _, l := range e.reps {
		refused += l.Metrics().RejectedTweaks
	}
	if refused == 0 || strat.runs.Load() < 2 {
		t.Fatalf("strategy runs %d, refused tweaks %d: the rolled-back tweak was not refused", strat.runs.Load(), refused)
	}
	// Every replica's failure memory learned the rollback.
	for r, l := range e.reps {
		if !rolledBackInMemory(l, "boom") {
			t.Fatalf("replica %d's memory has no rolled-back fix for the fault: %+v", r, l.Similar("boom", 3))
		}
	}
	// A fresh replica (empty store) gets the agent's config, threshold,
	// rejected tweaks and memory on its first call.
	fresh := e.add()
	e.call(3, "a", errBoom)
	if th, _ := fresh.Threshold("a"); th != manual(5) {
		t.Fatalf("fresh replica's threshold %+v", th)
	}
	if h := fresh.History("a"); len(h) == 0 || h[len(h)-1].Version != 1 {
		t.Fatalf("fresh replica's history %+v", h)
	}
	if chs := fresh.Changes("a"); len(chs) != 1 || chs[0].State != si.ChangeRolledBack {
		t.Fatalf("fresh replica's changes %+v", chs)
	}
	e.sync()
	e.sync()
	if !rolledBackInMemory(fresh, "boom") {
		t.Fatalf("fresh replica's memory has no rolled-back fix: %+v", fresh.Similar("boom", 3))
	}
	before := fresh.Metrics().RejectedTweaks
	e.clk.Advance(2 * time.Minute)
	for range 10 {
		e.call(3, "a", errBoom)
	}
	if fresh.Config("a").Version != 1 || fresh.Metrics().RejectedTweaks == before {
		t.Fatalf("fresh replica: version %d, refused %d: the rejected tweak was applied", fresh.Config("a").Version, fresh.Metrics().RejectedTweaks)
	}
}

func rolledBackInMemory(l *si.Loop, text string) bool {
	for _, m := range l.Similar(text, 3) {
		for _, f := range m.Fixes {
			if f.State == si.FixRolledBack {
				return true
			}
		}
	}
	return false
}

func TestFleetProposalAppliedOnce(t *testing.T) {
	strat := si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) {
		return &si.Tweak{Config: si.Config{Route: "reviewed"}, Reason: "needs a person", Review: true}, nil
	})
	e := newFleetEnv(t, 3, strat)
	if err := e.reps[0].SetThreshold("a", manual(3)); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		e.call(i%3, "a", errBoom)
		e.sync()
	}
	var ids []string
	for r, l := range e.reps {
		ps := l.Proposals(nil)
		if len(ps) != 1 {
			t.Fatalf("replica %d lists %d proposals, want the fleet's one", r, len(ps))
		}
		ids = append(ids, ps[0].ID)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("proposal IDs differ: %v", ids)
	}
	if err := e.reps[1].Approve(ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.reps[2].Approve(ids[0]); !errors.Is(err, si.ErrProposalState) {
		t.Fatalf("second Approve on another replica: %v, want ErrProposalState", err)
	}
	e.wantVersions("a", 2)
	if p := e.reps[0].Proposals(nil); p[0].Status != si.ProposalApplied {
		t.Fatalf("replica 0 sees the proposal %s", p[0].Status)
	}
}

// faultyFleet is a fleettest.Fleet that cannot be reached while down is set.
type faultyFleet struct {
	*fleettest.Fleet
	down atomic.Bool
}

var errUnreachable = fmt.Errorf("%w: connection refused", si.ErrFleetUnavailable)

func (f *faultyFleet) check() error {
	if f.down.Load() {
		return errUnreachable
	}
	return nil
}

func (f *faultyFleet) Load(ctx context.Context, id string) (uint64, []byte, error) {
	if err := f.check(); err != nil {
		return 0, nil, err
	}
	return f.Fleet.Load(ctx, id)
}

func (f *faultyFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	return f.Fleet.Commit(ctx, id, rev, v)
}

func (f *faultyFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Fleet.Add(ctx, d)
}

func (f *faultyFleet) Lease(ctx context.Context, id, owner string, ttl time.Duration) (bool, error) {
	if err := f.check(); err != nil {
		return false, err
	}
	return f.Fleet.Lease(ctx, id, owner, ttl)
}

func TestFleetUnreachable(t *testing.T) {
	strat := &countingStrategy{tweak: si.Config{Route: "backup"}}
	clk := fakeclock.New(t0)
	mem := fleettest.New(clk)
	e := &fleetEnv{t: t, clk: clk, mem: mem, strat: strat}
	// Replicas 0 and 1 reach the fleet through a link that can fail.
	link := &faultyFleet{Fleet: mem}
	e.fleet = link
	e.add()
	e.add()
	e.fleet = mem
	other := e.add()
	if err := e.reps[0].SetThreshold("a", manual(3)); err != nil {
		t.Fatal(err)
	}
	if err := e.reps[0].SetConfig("a", si.Config{Route: "main"}); err != nil {
		t.Fatal(err)
	}
	e.call(1, "a", nil)
	e.call(2, "a", nil)
	e.sync()

	link.down.Store(true)
	// Calls run under the last config; no change is applied.
	for i := range 10 {
		if rep := e.call(i%2, "a", errBoom); rep.ConfigVersion != 2 {
			t.Fatalf("call ran version %d while the fleet was down", rep.ConfigVersion)
		}
	}
	if err := e.reps[0].SyncFleet(context.Background()); !errors.Is(err, si.ErrFleetUnavailable) {
		t.Fatalf("SyncFleet while down: %v", err)
	}
	if err := e.reps[1].SetConfig("a", si.Config{Route: "other"}); !errors.Is(err, si.ErrFleetUnavailable) {
		t.Fatalf("SetConfig while down: %v, want ErrFleetUnavailable", err)
	}
	e.wantVersions("a", 2)
	if c := e.reps[1].Config("a"); c.Route != "main" {
		t.Fatalf("replica 1 runs %+v after a refused SetConfig", c)
	}
	if n := strat.runs.Load(); n != 0 {
		t.Fatalf("the strategy ran %d times while the fleet was down", n)
	}
	for r := range 2 {
		waitType(t, e.recs[r], si.EventFleetUnreachable)
	}
	// Meanwhile the third replica, which reaches the fleet, sets a
	// threshold.
	if err := other.SetThreshold("a", manual(9)); err != nil {
		t.Fatal(err)
	}

	// Back: the counts kept while down reach the fleet, and the
	// threshold set meanwhile is taken.
	link.down.Store(false)
	e.sync()
	e.clk.Advance(time.Second) // the fleet answered for a second: the outage is over
	e.sync()
	if st := other.Stats("a"); st.TotalCalls < 12 {
		t.Fatalf("the third replica booked %d calls, want the 12 the fleet made (10 while down)", st.TotalCalls)
	}
	for r := range 2 {
		if th, _ := e.reps[r].Threshold("a"); th != manual(9) {
			t.Fatalf("replica %d: threshold %+v after the fleet came back, want the one set meanwhile", r, th)
		}
		waitType(t, e.recs[r], si.EventFleetRecovered)
	}
	if err := e.reps[1].SetConfig("a", si.Config{Route: "after"}); err != nil {
		t.Fatal(err)
	}
	e.wantVersions("a", 3)
	if m := e.reps[0].Metrics(); m.FleetErrors == 0 {
		t.Fatalf("metrics %+v count no fleet error", m)
	}
}

// waitType waits until r has an event of type typ (the notifier runs on
// its own goroutine); it fails the test after 10 seconds.
func waitType(t *testing.T, r *recorder, typ si.EventType) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(r.types(), typ); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("events %v after 10s, want %s", r.types(), typ)
		}
	}
}
