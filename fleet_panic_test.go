package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// panicFleet is a user's Fleet, a fleettest.Fleet whose method named by
// armed panics while set; hits counts those panics.
type panicFleet struct {
	*fleettest.Fleet
	armed atomic.Pointer[string]
	hits  atomic.Int64
}

func (f *panicFleet) boom(method string) {
	if m := f.armed.Load(); m != nil && *m == method {
		f.hits.Add(1)
		panic("fleet: " + method + " exploded (redis password=hunter2)")
	}
}

func (f *panicFleet) Load(ctx context.Context, id string) (uint64, []byte, error) {
	f.boom("Load")
	return f.Fleet.Load(ctx, id)
}

func (f *panicFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	f.boom("Commit")
	return f.Fleet.Commit(ctx, id, rev, v)
}

func (f *panicFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	f.boom("Add")
	return f.Fleet.Add(ctx, d)
}

func (f *panicFleet) LoadStats(ctx context.Context, id string) ([]byte, error) {
	f.boom("LoadStats")
	return f.Fleet.LoadStats(ctx, id)
}

func (f *panicFleet) Lease(ctx context.Context, id, owner string, ttl time.Duration) (bool, error) {
	f.boom("Lease")
	return f.Fleet.Lease(ctx, id, owner, ttl)
}

func (f *panicFleet) Release(ctx context.Context, id, owner string) error {
	f.boom("Release")
	return f.Fleet.Release(ctx, id, owner)
}

func (f *panicFleet) AppendEvents(ctx context.Context, evs []si.Event) error {
	f.boom("AppendEvents")
	return f.Fleet.AppendEvents(ctx, evs)
}

func (f *panicFleet) Subscribe(fn func(string, uint64)) func() {
	f.boom("Subscribe")
	stop := f.Fleet.Subscribe(fn)
	return func() {
		f.boom("stop")
		stop()
	}
}

func (f *panicFleet) Note(ctx context.Context, kind, name, reason string, until, now time.Time) (bool, error) {
	f.boom("Note")
	return f.Fleet.Note(ctx, kind, name, reason, until, now)
}

func (f *panicFleet) Notes(ctx context.Context, kind string, now time.Time) ([]si.DeadRoute, error) {
	f.boom("Notes")
	return f.Fleet.Notes(ctx, kind, now)
}

// unreachableEvent waits up to 10 s for an EventFleetUnreachable among
// r's events, and returns its message ("" if none came).
func unreachableEvent(r *recorder) string {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		for _, ev := range r.events {
			if ev.Type == si.EventFleetUnreachable {
				r.mu.Unlock()
				return ev.Message
			}
		}
		r.mu.Unlock()
	}
	return ""
}

// A Fleet whose method panics, as New subscribes, on a call's path (an agent's first load,
// a lease, a decision's commit), in a getter or in the flusher (counts,
// notes, events, releases), does not fail the call or crash the process:
// fn's error comes back unchanged, the panic is reported as the fleet's
// other failures are (an outage: EventFleetUnreachable naming the method
// and the panic, Metrics.FleetErrors; a decision whose commit panicked
// is taken back, in Report.LoopErr), and once the fleet is back the
// replica syncs and counts its calls in the fleet.
func TestFleetPanicDoesNotFailTheCall(t *testing.T) {
	for _, m := range []string{"Subscribe", "Load", "Commit", "Add", "LoadStats", "Lease", "Release", "AppendEvents", "Note", "Notes"} {
		t.Run(m, func(t *testing.T) {
			e := newFleetEnv(t, 0, &countingStrategy{tweak: si.Config{Route: "backup"}}, noFloor)
			pf := &panicFleet{Fleet: e.mem}
			pf.armed.Store(&m)
			l := e.addVia(pf)
			e.add()
			// The fleet holds another agent's statistics (a getter of it
			// loads them) and the agent's threshold.
			e.call(1, "other", errBoom)
			if err := e.reps[1].SyncFleet(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := e.reps[1].SetThreshold("a", manual(3)); err != nil {
				t.Fatal(err)
			}
			var loopErr error
			for i := range 6 {
				rep, pv, got := callNoPanic(l, "a", errBoom)
				if errors.Is(rep.LoopErr, si.ErrFleetUnavailable) {
					loopErr = rep.LoopErr
				}
				if pv != nil {
					t.Fatalf("call %d panicked with the fleet's panic %v; want fn's error", i, pv)
				}
				if got != errBoom {
					t.Fatalf("call %d returned %v, want fn's error %v unchanged", i, got, errBoom)
				}
				e.clk.Advance(10 * time.Millisecond)
			}
			getterNoPanic(t, l, "other")
			l.SyncFleet(context.Background()) // its error is the panic's, or the back-off's
			if pf.hits.Load() == 0 {
				t.Fatalf("the fleet's %s was never called while it panicked: the test does not reach it", m)
			}
			msg := unreachableEvent(e.recs[0])
			if !strings.Contains(msg, m) || !strings.Contains(msg, "panic") {
				t.Errorf("EventFleetUnreachable message %q; want one naming %s and its panic", msg, m)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("EventFleetUnreachable message %q holds the secret in the panic's value", msg)
			}
			if n := l.Metrics().FleetErrors; n == 0 {
				t.Error("Metrics.FleetErrors is 0; want the panic counted")
			}
			if m == "Commit" {
				// The decision whose commit panicked is taken back, and
				// the call that made it says so.
				if !strings.Contains(fmt.Sprint(loopErr), "Commit panicked") {
					t.Errorf("Report.LoopErr %v; want the decision's commit that panicked (ErrFleetUnavailable)", loopErr)
				}
				if c := l.Config("a"); c.Route == "backup" {
					t.Errorf("config v%d (route %q) in force, though its commit panicked", c.Version, c.Route)
				}
			}
			pf.armed.Store(nil)
			fleetBack(t, e, l)
		})
	}
}

// getterNoPanic reads the statistics of id, an agent l does not run.
func getterNoPanic(t *testing.T, l *si.Loop, id string) {
	t.Helper()
	defer func() {
		if pv := recover(); pv != nil {
			t.Fatalf("Stats(%q) panicked with the fleet's panic %v", id, pv)
		}
	}()
	l.Stats(id)
}

// fleetBack checks that, the fleet answering again, l syncs within 10
// s (no lock of the fleet's left held), its calls succeed and the fleet
// counts them.
func fleetBack(t *testing.T, e *fleetEnv, l *si.Loop) {
	t.Helper()
	done := make(chan error, 1)
	before := e.pooled("a")
	go func() {
		var err error
		for range 5 {
			e.clk.Advance(2 * time.Second) // past the back-off and the outage's settling
			if err = l.SyncFleet(context.Background()); err == nil {
				break
			}
		}
		if err == nil {
			_, _, err = callNoPanic(l, "a", nil)
		}
		if err == nil {
			err = l.SyncFleet(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, errBoom) {
			t.Fatalf("once the fleet is back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replica hangs once the fleet that panicked is back")
	}
	if got := e.pooled("a"); got <= before {
		t.Errorf("the fleet counts %d calls of a, as before the fleet came back; want the replica's calls sent", got)
	}
}

// A Fleet whose Subscribe's stop function panics does not fail Close:
// it returns the panic as its error, and the loop is closed.
func TestFleetUnsubscribePanicDoesNotFailClose(t *testing.T) {
	e := newFleetEnv(t, 0, nil, noFloor)
	pf := &panicFleet{Fleet: e.mem}
	l := e.addVia(pf)
	e.call(0, "a", nil)
	stop := "stop"
	pf.armed.Store(&stop)
	var err error
	func() {
		defer func() {
			if pv := recover(); pv != nil {
				t.Fatalf("Close panicked with the fleet's panic %v", pv)
			}
		}()
		err = l.Close()
	}()
	if !errors.Is(err, si.ErrFleetUnavailable) || !strings.Contains(fmt.Sprint(err), "panicked") {
		t.Errorf("Close returned %v; want the unsubscription's panic (ErrFleetUnavailable)", err)
	}
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return errBoom }); err != errBoom {
		t.Errorf("a call after Close returned %v, want fn's error", err)
	}
}
