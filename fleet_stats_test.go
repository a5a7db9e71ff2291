package selfimprove_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestGettersStatsFromFleet: a replica that never loaded an agent answers
// Stats, Health, Clusters and View with the fleet's calls (issue 28, item
// 5). Before, it counted the calls it had saved itself: none.
func TestGettersStatsFromFleet(t *testing.T) {
	e := newFleetEnv(t, 3, nil)
	for _, l := range e.reps {
		scoringOn(t, l)
	}
	boom := errors.New("upstream: connection reset by peer")
	for i := range 40 {
		var err error
		if i%4 == 0 {
			err = boom
		}
		e.call(0, "busy", err)
	}
	for range 20 {
		e.scored(1, "busy", 0.8, 0.01, false)
	}
	// A replica sends its statistics after its own calls, at most every
	// 2 seconds, as they were before the flush, and again once the fleet
	// brought it calls they lacked: within a few flushes and 2 seconds
	// of the last call, the fleet's statistics hold every call.
	e.sync()
	e.sync()
	e.clk.Advance(2 * time.Second)
	e.call(0, "busy", nil)
	e.sync()
	e.clk.Advance(2 * time.Second)
	e.sync()

	want := e.reps[0].Stats("busy")
	if want.Calls != 61 || want.Failures != 10 {
		t.Fatalf("replica 0 (loaded): %d calls, %d failures; want the fleet's 61 and 10", want.Calls, want.Failures)
	}
	l := e.reps[2]
	st := l.Stats("busy")
	if st.Calls != 61 || st.Failures != 10 || st.TotalCalls != 61 {
		t.Fatalf("replica 2 (never loaded): Stats %d calls (%d in all), %d failures; want the fleet's 61, 61 and 10",
			st.Calls, st.TotalCalls, st.Failures)
	}
	if st.Scored != 20 || st.Quality < 0.79 || st.Quality > 0.81 {
		t.Fatalf("replica 2: Stats scored %d, quality %v; want 20 scores of 0.8", st.Scored, st.Quality)
	}
	if h := l.Health("busy"); h >= 0.99 || h <= 0.5 {
		t.Fatalf("replica 2: Health %v; want the fleet's (10 failures in 61 calls)", h)
	}
	cs := l.Clusters("busy")
	if len(cs) != 1 || cs[0].Count != 10 {
		t.Fatalf("replica 2: Clusters %+v; want one of 10 failures", cs)
	}
	v, known := l.View("busy")
	if !known || v.Loaded || v.Stats.Calls != 61 || len(v.Versions) == 0 {
		t.Fatalf("replica 2: View known %v loaded %v calls %d versions %v; want known, not loaded, 61 calls, scored versions",
			known, v.Loaded, v.Stats.Calls, v.Versions)
	}
	for range l.Views() {
		t.Fatal("replica 2 loaded the agent by reading it")
	}

	// The statistics follow the calls: 20 more, 2 seconds on, are in
	// the fleet's at the next flush.
	e.clk.Advance(2 * time.Second)
	for range 20 {
		e.call(0, "busy", nil)
	}
	e.sync()
	if got := l.Stats("busy").Calls; got != 81 {
		t.Fatalf("replica 2 after 20 more calls: %d calls, want 81", got)
	}
}

// TestFleetStatsSentEveryTwoSeconds: a replica sends an agent's
// statistics at most every 2 seconds, and only after calls of its own;
// the last calls of a burst go with the next delta.
func TestFleetStatsSentEveryTwoSeconds(t *testing.T) {
	e := newFleetEnv(t, 0, nil)
	spy := &statsFleet{Fleet: e.mem}
	e.fleet = spy
	e.add()
	for range 5 {
		e.call(0, "a", nil)
		e.sync()
	}
	if spy.sent != 1 {
		t.Fatalf("5 flushes within 2 seconds sent the statistics %d times, want 1", spy.sent)
	}
	// The calls after the first send go with the next delta 2 seconds
	// on (a sync, or a poll), calls or none.
	e.clk.Advance(2 * time.Second)
	e.sync()
	if spy.sent != 2 {
		t.Fatalf("a flush 2 seconds on sent the statistics of the last calls %d times in all, want 2", spy.sent)
	}
	e.clk.Advance(2 * time.Second)
	e.sync() // no calls since: nothing to send
	if spy.sent != 2 {
		t.Fatalf("a flush with no calls since the last statistics sent them again")
	}
	e.call(0, "a", nil)
	e.clk.Advance(2 * time.Second)
	e.sync()
	if spy.sent != 3 {
		t.Fatalf("a flush 2 seconds later, with a call, sent the statistics %d times in all, want 3", spy.sent)
	}
}

// TestFleetStatsInvalid: statistics the fleet holds that are invalid or
// too large are left out (the replica's own are reported: none) and
// reported once a minute per agent, with no event; the other getters
// still answer from the fleet.
func TestFleetStatsInvalid(t *testing.T) {
	for _, bad := range []struct {
		name string
		b    []byte
	}{
		{"not JSON", []byte("{oops")},
		{"another agent's", nil}, // filled below
		{"negative calls", []byte(`{"format":2,"agent_id":"a","agent_id_b64":"YQ==","config":{"version":1},"max_version":1,"generation":0,"calls":{"total":-5}}`)},
		{"over 256 KiB", bytes.Repeat([]byte(" "), 300<<10)},
	} {
		t.Run(bad.name, func(t *testing.T) {
			var lines bytes.Buffer
			e := newFleetEnv(t, 1, nil)
			for range 5 {
				e.call(0, "a", nil)
			}
			e.sync()
			if err := e.reps[0].SetConfig("a", si.Config{Route: "r2"}); err != nil {
				t.Fatal(err)
			}
			b := bad.b
			if b == nil {
				e.call(0, "other", nil)
				e.sync()
				b, _ = e.mem.LoadStats(context.Background(), "other")
			}
			e.fleet = &statsFleet{Fleet: e.mem, planted: b}
			e.opts = append(e.opts, si.WithLogger(slog.New(slog.NewTextHandler(&lines, nil))))
			l := e.add()
			for range 3 {
				if st := l.Stats("a"); st.Calls != 0 {
					t.Fatalf("Stats with invalid fleet statistics: %d calls, want this replica's own: 0", st.Calls)
				}
			}
			if c := l.Config("a"); c.Route != "r2" {
				t.Fatalf("Config: route %q, want the fleet's r2", c.Route)
			}
			if n := strings.Count(lines.String(), "invalid statistics"); n != 1 {
				t.Fatalf("%d log lines for 3 reads of invalid statistics, want 1:\n%s", n, lines.String())
			}
			if m := l.Metrics(); m.FleetErrors != 3 {
				t.Fatalf("FleetErrors %d, want 3", m.FleetErrors)
			}
		})
	}
}

// TestFleetStatsOfCallsOnly: an agent that has only run calls (no
// decision, no save yet: the fleet has no shared state of it) is known
// to a replica that never loaded it, with the fleet's calls. Before, it
// was unknown (0 calls), until a save or a decision.
func TestFleetStatsOfCallsOnly(t *testing.T) {
	e := newFleetEnv(t, 2, nil)
	for range 5 {
		e.call(0, "plain", nil)
	}
	e.sync()
	if rev, _, _ := e.mem.Load(context.Background(), "plain"); rev != 0 {
		t.Fatalf("the fleet has a shared state of the agent (revision %d): the test needs one without", rev)
	}
	if st := e.reps[1].Stats("plain"); st.Calls != 5 {
		t.Fatalf("Stats: %d calls, want the fleet's 5", st.Calls)
	}
	if v, known := e.reps[1].View("plain"); !known || v.Stats.Calls != 5 || v.Config.Version != 1 {
		t.Fatalf("View: known %v, %d calls, version %d; want known, 5 calls, the default config", known, v.Stats.Calls, v.Config.Version)
	}
	if _, known := e.reps[1].View("nobody"); known {
		t.Fatal("View of an agent the fleet does not know: known")
	}
}

// TestFleetStatsUnderVerification: calls under verification, whose
// counts go to the fleet from the call itself, are in the statistics the
// replica sends. Before, they were left out until the replica made
// calls outside verification again.
func TestFleetStatsUnderVerification(t *testing.T) {
	e := newFleetEnv(t, 2, &countingStrategy{tweak: si.Config{Route: "b"}})
	if err := e.reps[0].SetThreshold("a", manual(2)); err != nil {
		t.Fatal(err)
	}
	for e.reps[0].Config("a").Version == 1 {
		e.call(0, "a", errBoom)
		e.sync()
	}
	// The statistics of the calls before the change go first: none are
	// owed when the calls under verification begin.
	e.clk.Advance(3 * time.Second)
	e.sync()
	made := e.reps[0].Stats("a").TotalCalls
	for range 3 {
		e.call(0, "a", nil)
		made++
	}
	for range 2 {
		e.clk.Advance(3 * time.Second)
		e.sync()
	}
	if got := e.reps[1].Stats("a").TotalCalls; got != made {
		t.Fatalf("the other replica: %d calls, want the %d made (3 under verification)", got, made)
	}
}

// TestFleetStatsNotOverwrittenStale: when two replicas end a burst, the
// statistics the fleet keeps hold every call, whichever replica sent
// last: a replica whose statistics lacked the other's last calls sends
// them again once it has them. Before, replica 1's, short of replica 0's
// last calls, stayed.
func TestFleetStatsNotOverwrittenStale(t *testing.T) {
	e := newFleetEnv(t, 3, nil)
	for range 10 {
		e.call(0, "a", nil)
	}
	e.call(1, "a", nil)
	e.sync()
	for range 5 {
		e.clk.Advance(3 * time.Second)
		e.sync()
	}
	if got := e.reps[2].Stats("a").TotalCalls; got != 11 {
		t.Fatalf("the third replica: %d calls, want the 11 made", got)
	}
}

// TestFleetStatsNotOnAResentDelta: statistics go with a new delta, not
// with one sent again after its answer was lost (the fleet, which may
// have booked it, would drop them), and are not lost with it.
func TestFleetStatsNotOnAResentDelta(t *testing.T) {
	e := newFleetEnv(t, 0, nil)
	link := &lossyFleet{faultyFleet: faultyFleet{Fleet: e.mem}}
	e.addVia(link)
	e.add()
	e.call(0, "a", nil)
	e.sync()
	// A delta within 2 seconds of the statistics: without them. Its
	// answer is lost after the fleet booked it; sent again 3 seconds on,
	// it goes as it was, and the statistics with the next delta.
	e.call(0, "a", nil)
	link.lose.Store(true)
	if err := e.reps[0].SyncFleet(context.Background()); err == nil {
		t.Fatal("SyncFleet succeeded with its answer lost")
	}
	link.lose.Store(false)
	e.clk.Advance(3 * time.Second)
	for range 2 {
		e.sync()
	}
	if got := e.reps[1].Stats("a").TotalCalls; got != 2 {
		t.Fatalf("the other replica: %d calls, want the 2 made", got)
	}
}

// statsFleet counts the deltas sent with statistics, and answers
// LoadStats with planted, when set.
type statsFleet struct {
	*fleettest.Fleet
	sent    int
	planted []byte
}

func (f *statsFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	for i := range d {
		if d[i].Stats != nil {
			f.sent++
		}
	}
	return f.Fleet.Add(ctx, d)
}

func (f *statsFleet) LoadStats(ctx context.Context, id string) ([]byte, error) {
	if f.planted != nil {
		return f.planted, nil
	}
	return f.Fleet.LoadStats(ctx, id)
}

// A flush costs about one allocation per agent, whatever the
// replication's bookkeeping asks of each: the inputs it gives the agents
// in turn share one (fleetLink.book). Giving each agent inputs of their
// own made a SyncFleet of 1,000 idle agents allocate 6,029 times, where
// it had allocated 1,029 before they were inputs.
func TestFlushAllocationsPerAgent(t *testing.T) {
	if si.TestingRace {
		t.Skip("the race detector allocates of its own")
	}
	const n = 1000
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithFleet(fleettest.New(clk)), si.WithFleetFlush(0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range n {
		l.ExecuteWithImprovement(ctx, fmt.Sprint("a", i), func(context.Context, si.Config) error { return nil })
	}
	if err := l.SyncFleet(ctx); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(5, func() { l.SyncFleet(ctx) }); allocs > 1.5*n {
		t.Errorf("a SyncFleet of %d idle agents allocates %.0f times, want at most %d", n, allocs, n*3/2)
	}
}

// TestStatsIgnoredIsEachReplicasOwn: Stats.Ignored counts the calls the
// replica's own callers cancelled (the fleet keeps no count of them),
// also on a replica that has not loaded the agent and answers from the
// fleet's statistics. Before, that replica reported the Ignored of
// whichever replica sent the statistics last: 4, or 1, never its own 0.
func TestStatsIgnoredIsEachReplicasOwn(t *testing.T) {
	for _, last := range []int{0, 1} {
		e := newFleetEnv(t, 3, nil)
		for r, n := range []int{4, 1} {
			for range n {
				ctx, cancel := context.WithCancel(context.Background())
				rep, _ := e.reps[r].ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error {
					cancel()
					return context.Canceled
				})
				if !rep.Ignored {
					t.Fatalf("replica %d: a call its caller cancelled was not ignored: %+v", r, rep)
				}
			}
			e.call(r, "a", nil)
		}
		e.sync()
		e.clk.Advance(2 * time.Second)
		e.call(last, "a", nil)
		if err := e.reps[last].SyncFleet(context.Background()); err != nil { // it sends the statistics last
			t.Fatal(err)
		}
		for r, want := range []int64{4, 1, 0} {
			if got := e.reps[r].Stats("a").Ignored; got != want {
				t.Errorf("statistics sent last by replica %d: replica %d reports %d ignored, want its own %d", last, r, got, want)
			}
		}
	}
}
