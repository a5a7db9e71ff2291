package fleettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Run runs the behavioural suite every selfimprove.Fleet passes, as
// testing/slogtest does for slog handlers: this package's Fleet, the
// redisfleet module's, and yours. newFleet returns an empty fleet, and a
// second handle on the same fleet (another replica's), each time it is
// called. Each subtest gets a fleet of its own.
func Run(t *testing.T, newFleet func(t *testing.T) (si.Fleet, si.Fleet)) {
	run := func(name string, test func(t *testing.T, f, g si.Fleet)) {
		t.Run(name, func(t *testing.T) {
			f, g := newFleet(t)
			test(t, f, g)
		})
	}
	run("CompareAndSet", testCompareAndSet)
	run("RacingCommits", testRacingCommits)
	run("Notifications", testNotifications)
	run("PooledCounts", testPooledCounts)
	run("PooledScores", testPooledScores)
	run("FailuresBounded", testFailuresBounded)
	run("Lease", testLease)
	run("Events", testEvents)
	run("HostileAgentIDs", testHostileAgentIDs)
	run("Notes", testNotes)
	run("NotesBounded", testNotesBounded)
	run("NotesKindsApart", testNotesKindsApart)
	run("BatchOnce", testBatchOnce)
	run("Stats", testStats)
}

// testCompareAndSet checks that Commit succeeds only on the revision Load
// returned, through either handle, and that an agent nobody committed has
// revision 0.
func testCompareAndSet(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	rev, val, err := f.Load(ctx, "a")
	if err != nil || rev != 0 || val != nil {
		t.Fatalf("Load of an unknown agent: %d %q %v", rev, val, err)
	}
	first, err := f.Commit(ctx, "a", 0, []byte("one"))
	if err != nil || first == 0 {
		t.Fatalf("first Commit: %d %v", first, err)
	}
	if _, err := g.Commit(ctx, "a", 0, []byte("two")); !errors.Is(err, si.ErrFleetConflict) {
		t.Fatalf("Commit on a stale revision: %v, want ErrFleetConflict", err)
	}
	if rev, err = g.Commit(ctx, "a", first, []byte("two")); err != nil || rev != first+1 {
		t.Fatalf("second Commit: %d %v, want revision %d", rev, err, first+1)
	}
	rev, val, err = f.Load(ctx, "a")
	if err != nil || rev != first+1 || string(val) != "two" {
		t.Fatalf("Load: %d %q %v", rev, val, err)
	}
	if rev, _, _ := f.Load(ctx, "b"); rev != 0 {
		t.Fatalf("another agent has revision %d", rev)
	}
}

// testRacingCommits checks that of eight commits on revision 0 racing through
// both handles exactly one wins, and the others get ErrFleetConflict.
func testRacingCommits(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		h := f
		if i%2 == 1 {
			h = g
		}
		wg.Go(func() {
			if _, err := h.Commit(ctx, "a", 0, []byte{byte(i)}); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			} else if !errors.Is(err, si.ErrFleetConflict) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d commits on revision 0 succeeded, want 1", won)
	}
}

// testNotifications checks that a commit through f reaches g's subscriber
// with the agent's ID, even a hostile one, and the new revision.
func testNotifications(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	got := make(chan string, 10)
	stop := g.Subscribe(func(id string, rev uint64) { got <- fmt.Sprintf("%q@%d", id, rev) })
	defer stop()
	waitSubscribed(t, f, g, got)
	for _, id := range []string{"x\x00{y}", "\xff:\xfe"} {
		rev, err := f.Commit(ctx, id, 0, []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != fmt.Sprintf("%q@%d", id, rev) {
				t.Fatalf("notified %s, want %q@%d", s, id, rev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no notification after 10s")
		}
	}
}

// testPooledCounts checks that Add pools the replicas' counts and failures of
// a generation, starts again at a later one, ignores an earlier one, and
// keeps agents apart.
func testPooledCounts(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	d := si.FleetDelta{AgentID: "a", Replica: "r1", Gen: 3,
		Change:   si.FleetCounts{Calls: 5, Failures: 2, LatencyNS: 50, SuccessLatencyNS: 30, Consecutive: 1},
		Failures: []si.FleetFailure{{EndNS: 1, Gen: 3, Text: "boom"}, {EndNS: 2, Gen: 3, Text: "boom"}}}
	if _, err := f.Add(ctx, []si.FleetDelta{d}); err != nil {
		t.Fatal(err)
	}
	e := si.FleetDelta{AgentID: "a", Replica: "r2", Gen: 3, Change: si.FleetCounts{Calls: 2, Failures: 2, LatencyNS: 20, Consecutive: 2},
		Control: si.FleetCounts{Calls: 1, LatencyNS: 7, SuccessLatencyNS: 7}, Failures: []si.FleetFailure{{EndNS: 3, Gen: 3, Text: "boom"}}}
	ps, err := g.Add(ctx, []si.FleetDelta{e, {AgentID: "other", Gen: 1}})
	if err != nil || len(ps) != 2 {
		t.Fatalf("Add: %v %v", ps, err)
	}
	p := ps[0]
	want := si.FleetCounts{Calls: 7, Failures: 4, LatencyNS: 70, SuccessLatencyNS: 30, Consecutive: 3}
	if p.Gen != 3 || p.Change != want || p.Control != (si.FleetCounts{Calls: 1, LatencyNS: 7, SuccessLatencyNS: 7}) {
		t.Fatalf("pooled %+v, want change %+v", p, want)
	}
	if p.Total.Calls != 8 || p.Total.Failures != 4 {
		t.Fatalf("total %+v", p.Total)
	}
	if len(p.Failures) != 3 || p.Failures[2].Replica != "r2" || p.Failures[0].Replica != "r1" ||
		!(p.Failures[0].Seq < p.Failures[1].Seq && p.Failures[1].Seq < p.Failures[2].Seq) {
		t.Fatalf("failures %+v", p.Failures)
	}
	if ps[1].Change.Calls != 0 || ps[1].Total.Calls != 0 {
		t.Fatalf("another agent's counts: %+v", ps[1])
	}
	// A later generation starts again; the total goes on.
	ps, err = f.Add(ctx, []si.FleetDelta{{AgentID: "a", Replica: "r1", Gen: 4, Change: si.FleetCounts{Calls: 1}}})
	if err != nil || ps[0].Change.Calls != 1 || ps[0].Total.Calls != 9 {
		t.Fatalf("next generation: %+v %v", ps, err)
	}
	// An earlier one is not pooled any more.
	ps, err = f.Add(ctx, []si.FleetDelta{{AgentID: "a", Replica: "r2", Gen: 3, Change: si.FleetCounts{Calls: 1}}})
	if err != nil || ps[0].Change.Calls != 0 || ps[0].Total.Calls != 10 {
		t.Fatalf("stale generation: %+v %v", ps, err)
	}
}

// testFailuresBounded checks that a fleet keeps at most MaxFleetFailures
// failures of an agent, each with its text cut to 200 bytes.
func testFailuresBounded(t *testing.T, f, _ si.Fleet) {
	ctx := context.Background()
	var fails []si.FleetFailure
	for i := range 2 * si.MaxFleetFailures {
		fails = append(fails, si.FleetFailure{EndNS: int64(i), Text: strings.Repeat("x", 5000)})
	}
	for range 3 {
		ps, err := f.Add(ctx, []si.FleetDelta{{AgentID: "a", Gen: 1, Change: si.FleetCounts{Calls: 64, Failures: 64}, Failures: fails}})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ps[0].Failures); n != si.MaxFleetFailures {
			t.Fatalf("%d failures kept, want %d", n, si.MaxFleetFailures)
		}
		for _, f := range ps[0].Failures {
			if len(f.Text) > 200 {
				t.Fatalf("a failure's text kept %d bytes", len(f.Text))
			}
		}
	}
}

// testLease checks that one replica at a time holds an agent's lease, that
// the holder can renew and release it, and that a release by anyone else is
// ignored.
func testLease(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	if ok, err := f.Lease(ctx, "a", "r1", time.Minute); !ok || err != nil {
		t.Fatalf("Lease: %v %v", ok, err)
	}
	if ok, err := g.Lease(ctx, "a", "r2", time.Minute); ok || err != nil {
		t.Fatalf("Lease held by another: %v %v", ok, err)
	}
	if ok, err := g.Lease(ctx, "b", "r2", time.Minute); !ok || err != nil {
		t.Fatalf("another agent's lease: %v %v", ok, err)
	}
	if ok, err := f.Lease(ctx, "a", "r1", time.Minute); !ok || err != nil {
		t.Fatalf("renewal: %v %v", ok, err)
	}
	if err := g.Release(ctx, "a", "r2"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := g.Lease(ctx, "a", "r2", time.Minute); ok {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := f.Release(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Lease(ctx, "a", "r2", time.Minute); !ok || err != nil {
		t.Fatalf("Lease after release: %v %v", ok, err)
	}
}

// testEvents checks that events appended through either handle are read
// back in order, the most recent n of them, each with its exact agent ID.
func testEvents(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	evs := []si.Event{{ID: "1", Type: si.EventImprovementApplied, AgentID: "a\x00/", Message: "one"},
		{ID: "2", Type: si.EventRolledBack, AgentID: "b", Message: "two"}}
	if err := f.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := g.AppendEvents(ctx, []si.Event{{ID: "3", Type: si.EventConfigSet, AgentID: "c"}}); err != nil {
		t.Fatal(err)
	}
	got, err := g.Events(ctx, 2)
	if err != nil || len(got) != 2 || got[0].ID != "2" || got[1].ID != "3" {
		t.Fatalf("Events(2): %+v %v", got, err)
	}
	got, err = f.Events(ctx, 10)
	if err != nil || len(got) != 3 || got[0].AgentID != "a\x00/" {
		t.Fatalf("Events(10): %+v %v", got, err)
	}
	testEventsExactIDs(t, f, g)
}

// testEventsExactIDs checks that an event's agent ID comes back exactly,
// bytes that are not UTF-8 included (JSON alone would turn them into
// U+FFFD), and a UTF-8 one that looks like an escape as it is.
func testEventsExactIDs(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	ids := []string{"\xff\xfe", "a\xc3(b", "caf\xe9", "\uFFFD", "a\x00\x80"}
	for i, id := range ids {
		e := si.Event{ID: fmt.Sprint("x", i), Type: si.EventConfigSet, AgentID: id, Message: "set"}
		if err := f.AppendEvents(ctx, []si.Event{e}); err != nil {
			t.Fatalf("AppendEvents of agent %q: %v", id, err)
		}
	}
	got, err := g.Events(ctx, len(ids))
	if err != nil || len(got) != len(ids) {
		t.Fatalf("Events(%d): %+v %v", len(ids), got, err)
	}
	for i, id := range ids {
		if got[i].AgentID != id {
			t.Errorf("event of agent %q read back as agent %q", id, got[i].AgentID)
		}
	}
}

// testHostileAgentIDs checks that agent IDs with path separators, braces, NUL
// bytes, invalid UTF-8 or the maximum length are stored, counted, leased
// and given their statistics apart.
func testHostileAgentIDs(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	ids := []string{"a/b/../../c", "{a}", "}{", "a\x00b", "a\x00c", "\xff\xfe", strings.Repeat("é", si.MaxAgentIDLen/2),
		strings.Repeat("{", si.MaxAgentIDLen), "", "*", "a:state", "prefix}:x"}
	for i, id := range ids {
		if _, err := f.Commit(ctx, id, 0, []byte(id)); err != nil {
			t.Fatalf("Commit(%q): %v", id, err)
		}
		d := si.FleetDelta{AgentID: id, Gen: 1, Change: si.FleetCounts{Calls: int64(i + 1)}, Stats: []byte("s" + id)}
		if _, err := f.Add(ctx, []si.FleetDelta{d}); err != nil {
			t.Fatal(err)
		}
		if ok, err := f.Lease(ctx, id, "r", time.Minute); !ok || err != nil {
			t.Fatalf("Lease(%q): %v %v", id, ok, err)
		}
	}
	for i, id := range ids {
		rev, val, err := g.Load(ctx, id)
		if err != nil || rev == 0 || !bytes.Equal(val, []byte(id)) {
			t.Fatalf("Load(%q): %d %q %v", id, rev, val, err)
		}
		ps, err := g.Add(ctx, []si.FleetDelta{{AgentID: id, Gen: 1}})
		if err != nil || ps[0].Change.Calls != int64(i+1) {
			t.Fatalf("counts of %q: %+v %v", id, ps, err)
		}
		if st, err := g.LoadStats(ctx, id); err != nil || string(st) != "s"+id {
			t.Fatalf("LoadStats(%q): %q %v", id, st, err)
		}
	}
}

// waitSubscribed commits to a probe agent until g's subscription hears of
// it (a subscription may take a moment to start), draining got.
func waitSubscribed(t *testing.T, f, g si.Fleet, got chan string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for rev := uint64(0); ; rev++ {
		if _, err := f.Commit(ctx, "probe", rev, []byte("p")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			for {
				select {
				case <-got:
				case <-time.After(100 * time.Millisecond):
					return
				}
			}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscription heard nothing after 10s")
		}
	}
}

// testBatchOnce checks that a numbered delta sent twice (its answer lost)
// is booked once, and that another replica's delta of the same number is
// booked too.
func testBatchOnce(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	d := si.FleetDelta{AgentID: "a", Replica: "r1", Gen: 1, Batch: 1, Change: si.FleetCounts{Calls: 3, Failures: 1, LatencyNS: 30, SuccessLatencyNS: 20}}
	for range 2 {
		if _, err := f.Add(ctx, []si.FleetDelta{d}); err != nil {
			t.Fatal(err)
		}
	}
	d2 := d
	d2.Replica = "r2"
	p, err := g.Add(ctx, []si.FleetDelta{d2})
	if err != nil {
		t.Fatal(err)
	}
	if p[0].Total.Calls != 6 || p[0].Change.Calls != 6 {
		t.Fatalf("two replicas' deltas of 3 calls, one sent twice: the fleet counts %d calls (change %d), want 6", p[0].Total.Calls, p[0].Change.Calls)
	}
	d.Batch = 2
	if p, err = f.Add(ctx, []si.FleetDelta{d}); err != nil || p[0].Total.Calls != 9 {
		t.Fatalf("the next batch: %d calls, %v; want 9", p[0].Total.Calls, err)
	}
}
