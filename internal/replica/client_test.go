package replica_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The transport's tests drive a Client on a real in-process fleet
// (fleettest), through a fault switch (faulty) that makes it unreachable
// or refusing, in a synctest bubble: time moves only when every
// goroutine waits, so each sequence below is exact.

type client = replica.Client[si.FleetDelta, si.FleetPool, si.Event, si.DeadRoute]

// faulty is a fleet whose operations fail while down (unreachable) or
// refuse is set (an error that is no outage).
type faulty struct {
	si.Fleet
	down, refuse atomic.Bool
	// hang: Commit waits for its context's end, then reports the fleet
	// unreachable (a hang).
	hang atomic.Bool
}

func (f *faulty) fault() error {
	switch {
	case f.down.Load():
		return si.ErrFleetUnavailable
	case f.refuse.Load():
		return errors.New("NOPERM: no right to run the script")
	}
	return nil
}

func (f *faulty) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	if f.hang.Load() {
		<-ctx.Done()
		return 0, fmt.Errorf("%w: %w", si.ErrFleetUnavailable, ctx.Err())
	}
	if err := f.fault(); err != nil {
		return 0, err
	}
	return f.Fleet.Commit(ctx, id, rev, v)
}

func (f *faulty) Add(ctx context.Context, ds []si.FleetDelta) ([]si.FleetPool, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Fleet.Add(ctx, ds)
}

func (f *faulty) Load(ctx context.Context, id string) (uint64, []byte, error) {
	if err := f.fault(); err != nil {
		return 0, nil, err
	}
	return f.Fleet.Load(ctx, id)
}

func (f *faulty) Lease(ctx context.Context, id, owner string, ttl time.Duration) (bool, error) {
	if err := f.fault(); err != nil {
		return false, err
	}
	return f.Fleet.Lease(ctx, id, owner, ttl)
}

func (f *faulty) Release(ctx context.Context, id, owner string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Fleet.Release(ctx, id, owner)
}

func (f *faulty) AppendEvents(ctx context.Context, evs []si.Event) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Fleet.AppendEvents(ctx, evs)
}

func (f *faulty) Note(ctx context.Context, kind, name, reason string, until, now time.Time) (bool, error) {
	if err := f.fault(); err != nil {
		return false, err
	}
	return f.Fleet.Note(ctx, kind, name, reason, until, now)
}

// hooks records what the Client told the Loop.
type hooks struct {
	mu      sync.Mutex
	said    []string
	flushes int
}

func (h *hooks) Now() time.Time { return time.Now() }
func (h *hooks) Flush() error {
	h.mu.Lock()
	h.flushes++
	h.mu.Unlock()
	return nil
}
func (h *hooks) Back() { h.add("back") }
func (h *hooks) Outage(now time.Time, err error, d time.Duration) {
	if err != nil {
		h.add("down")
	} else {
		h.add("up after " + d.String())
	}
}
func (h *hooks) add(s string) {
	h.mu.Lock()
	h.said = append(h.said, s)
	h.mu.Unlock()
}
func (h *hooks) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.said
	h.said = nil
	return s
}
func (h *hooks) flushed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.flushes
}

func newClient(t *testing.T, name string, f si.Fleet) (*client, *hooks) {
	t.Helper()
	h := &hooks{}
	c := replica.NewClient(replica.Config[si.FleetDelta, si.FleetPool, si.Event, si.DeadRoute]{
		Fleet: f, Name: name, Timeout: time.Second, Hooks: h,
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoteOf:    func(d si.DeadRoute) (string, time.Time) { return d.Route, d.Until },
		MaxEvents: 3, MaxNotes: 2,
	})
	return c, h
}

// withClient runs test in a synctest bubble with a client "r1" on a
// faulty in-memory fleet.
func withClient(t *testing.T, test func(t *testing.T, f *faulty, c *client, h *hooks)) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Fleet: fleettest.New(nil)}
		c, h := newClient(t, "r1", f)
		test(t, f, c, h)
	})
}

// TestClientOutage: an outage is one "down" at its first failure, and
// one "up" once the fleet has answered for Settle; the first answer
// brings the replica back at once (Back), and a failure within Settle
// belongs to the same outage. While it backs off, events wait.
func TestClientOutage(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		f.down.Store(true)
		c.SendEvents() // nothing queued: no operation
		c.LogEvents([]si.Event{{ID: "e1"}})
		c.SendEvents()
		c.SendEvents() // backing off: not tried
		if !c.Down() || c.Counts.Outages.Load() != 1 {
			t.Fatalf("down %v, outages %d: want down, 1", c.Down(), c.Counts.Outages.Load())
		}
		time.Sleep(3 * time.Second)
		f.down.Store(false)
		c.SendEvents() // backing off: the events wait for a flush to find the fleet
		c.Up()         // a flush's read found it: back
		c.SendEvents() // the event sent
		time.Sleep(500 * time.Millisecond)
		f.down.Store(true)
		c.Failed(si.ErrFleetUnavailable, "", nil) // within Settle: the same outage
		f.down.Store(false)
		c.Up()
		time.Sleep(replica.Settle)
		c.Up()
		c.Up()
		want := []string{"down", "back", "back", "up after 3.5s"}
		if got := h.take(); !cmp.Equal(got, want) {
			t.Errorf("hooks told %q, want %q", got, want)
		}
		if n := c.Counts.Outages.Load(); n != 1 {
			t.Errorf("outages %d, want 1", n)
		}
		evs, _ := f.Events(context.Background(), 10)
		if len(evs) != 1 || evs[0].ID != "e1" {
			t.Errorf("the fleet's log holds %v, want e1 once", evs)
		}
	})
}

// TestClientCommitOutcomes: a commit's answer is a value: Landed with
// the new revision, Conflict, Unreachable, Refused, or NotSent (backing
// off, or its chain's time spent: ErrSlow); only a commit sent calls
// sending, and each sent is counted.
func TestClientCommitOutcomes(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		sent := 0
		sending := func() { sent++ }
		type res struct {
			Out  replica.Outcome
			Rev  uint64
			Kind error
		}
		do := func(w *replica.Chain, rev uint64) res {
			out, nrev, err := c.Commit(w, "a", rev, []byte("{}"), sending, nil)
			var kind error
			for _, k := range []error{replica.ErrSlow, si.ErrFleetConflict, si.ErrFleetUnavailable, replica.ErrRefused} {
				if errors.Is(err, k) {
					kind = k
					break
				}
			}
			return res{out, nrev, kind}
		}
		got := []res{do(nil, 0)}
		got = append(got, do(nil, 0)) // the revision moved on
		f.refuse.Store(true)
		got = append(got, do(nil, got[0].Rev))
		f.refuse.Store(false)
		f.down.Store(true)
		got = append(got, do(nil, got[0].Rev))
		got = append(got, do(nil, got[0].Rev)) // backing off
		f.down.Store(false)
		c.Up()
		w := replica.NewChain(time.Second)
		time.Sleep(950 * time.Millisecond)
		got = append(got, do(w, got[0].Rev)) // a twentieth of the time left
		want := []res{
			{replica.Landed, 1, nil},
			{replica.Conflict, 0, si.ErrFleetConflict},
			{replica.Refused, 0, replica.ErrRefused},
			{replica.Unreachable, 0, si.ErrFleetUnavailable},
			{replica.NotSent, 0, si.ErrFleetUnavailable},
			{replica.NotSent, 0, replica.ErrSlow},
		}
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return a == b })); d != "" {
			t.Errorf("outcomes (-want +got):\n%s", d)
		}
		if sent != 4 || c.Counts.Commits.Load() != 4 || c.Counts.Conflicts.Load() != 1 {
			t.Errorf("sent %d, commits %d, conflicts %d: want 4, 4, 1", sent, c.Counts.Commits.Load(), c.Counts.Conflicts.Load())
		}
	})
}

// TestClientEventsOutbox: events wait for the fleet while it cannot be
// reached, at most MaxEvents of them (the oldest dropped, counted); a
// refusal drops them.
func TestClientEventsOutbox(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		f.down.Store(true)
		c.LogEvents([]si.Event{{ID: "1"}, {ID: "2"}})
		c.SendEvents()
		c.LogEvents([]si.Event{{ID: "3"}, {ID: "4"}}) // 1 dropped: at most 3 wait
		f.down.Store(false)
		c.Up()
		c.SendEvents()
		f.refuse.Store(true)
		c.LogEvents([]si.Event{{ID: "5"}})
		c.SendEvents() // refused: dropped
		f.refuse.Store(false)
		c.SendEvents()
		evs, _ := f.Events(context.Background(), 10)
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		if want := []string{"2", "3", "4"}; !cmp.Equal(ids, want) {
			t.Errorf("the fleet's log holds %q, want %q", ids, want)
		}
		if n := c.Counts.Errors.Load(); n != 3 { // the outage, the drop, the refusal
			t.Errorf("errors %d, want 3", n)
		}
	})
}

// TestClientNotes: posted notes wait in a bounded outbox, and each is
// told whether a note of its kind and name was in force when it was
// sent, or the error.
func TestClientNotes(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		now := time.Now()
		var got []string
		note := func(name string) replica.Note {
			return replica.Note{Kind: "cause", Name: name, Until: now.Add(time.Minute), Now: now, Then: func(_ time.Time, was bool, err error) {
				switch {
				case err != nil:
					got = append(got, name+": error")
				case was:
					got = append(got, name+": was")
				default:
					got = append(got, name+": new")
				}
			}}
		}
		ok := []bool{c.Post(note("x")), c.Post(note("x")), c.Post(note("y"))}
		if !cmp.Equal(ok, []bool{true, true, false}) {
			t.Errorf("posted %v, want the third refused (MaxNotes 2)", ok)
		}
		c.SendNotes(now, []replica.Note{note("z")})
		f.down.Store(true)
		c.SendNotes(now, []replica.Note{note("w")})
		if want := []string{"x: new", "x: was", "z: new", "w: error"}; !cmp.Equal(got, want) {
			t.Errorf("notes told %q, want %q", got, want)
		}
		f.down.Store(false)
		c.Up()
		if notes, ok := c.Read("cause", now); !ok || len(notes) != 2 {
			t.Errorf("read %v, %v: want the causes x and z", notes, ok)
		}
	})
}

// TestClientReplicaBook: a replica notes itself and reads the others
// every ReplicaEvery (or at once after SeenNow); a replica closed (Gone)
// drops out at once, one that died when its note ends.
func TestClientReplicaBook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fleettest.New(nil)
		c1, _ := newClient(t, "r1", f)
		c2, _ := newClient(t, "r2", f)
		c3, _ := newClient(t, "r3", f)
		t0 := time.Now()
		c1.Seen(t0)
		c2.Seen(t0)
		c1.Seen(t0.Add(time.Second)) // within ReplicaEvery: not read again
		if n := c1.ReplicasSeen(t0); n != 1 {
			t.Errorf("r1 sees %d replicas, want 1 (itself, read before r2 noted)", n)
		}
		c1.SeenNow()
		c1.Seen(t0.Add(time.Second))
		if n := c1.ReplicasSeen(t0); n != 2 {
			t.Errorf("r1 sees %d replicas after SeenNow, want 2", n)
		}
		c3.Seen(t0)
		c3.Gone() // closed: its note ends now
		at := t0.Add(time.Second + replica.ReplicaEvery)
		c1.Seen(at)
		if got := c1.Replicas(at); !cmp.Equal(got, map[string]time.Time{"r1": at, "r2": t0}) {
			t.Errorf("r1 sees %v, want r1 and r2", got)
		}
		// r2 died: its note ends ReplicaTTL after its last.
		end := t0.Add(replica.ReplicaTTL)
		c1.Seen(end)
		if got := c1.Replicas(end); len(got) != 1 {
			t.Errorf("r1 sees %v at r2's note's end, want itself only", got)
		}
	})
}

// TestClientFlusher: the flusher flushes when kicked (and when the fleet
// is back after an outage), not when Manual
// (the schedule owns every flush); Close flushes once more, ends the
// replica's note, unsubscribes, and is idempotent.
func TestClientFlusher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fleettest.New(nil)
		c, h := newClient(t, "r1", f)
		var notified atomic.Int64
		c.Start(func(string, uint64) { notified.Add(1) })
		c.Kick()
		synctest.Wait()
		if n := h.flushed(); n != 1 {
			t.Errorf("%d flushes after a kick, want 1", n)
		}
		c.Failed(si.ErrFleetUnavailable, "", nil)
		c.Up() // back: every agent is compared with the fleet at a flush now
		synctest.Wait()
		if n := h.flushed(); n != 2 {
			t.Errorf("%d flushes after the fleet came back, want 2", n)
		}
		c.Manual()
		c.Kick()
		synctest.Wait()
		if n := h.flushed(); n != 2 {
			t.Errorf("%d flushes after a kick under Manual, want still 2", n)
		}
		f.Commit(context.Background(), "a", 0, []byte("{}"))
		c.Seen(time.Now())
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		f.Commit(context.Background(), "a", 1, []byte("{}"))
		if n, m := h.flushed(), notified.Load(); n != 3 || m != 1 {
			t.Errorf("%d flushes and %d notifications after Close, want 3 and 1", n, m)
		}
		if notes, _ := f.Notes(context.Background(), replica.NoteReplica, time.Now()); len(notes) != 0 {
			t.Errorf("the replica's note is still in force after Close: %v", notes)
		}
	})
}

// TestClientAddAndLoad: an Add's deltas are to be sent again when the
// fleet could not be reached or the chain's time was spent, not when
// they were refused; a load's answer is a value (LoadOK, LoadDown,
// LoadBad, LoadSlow).
func TestClientAddAndLoad(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		d := []si.FleetDelta{{AgentID: "a", Replica: "r1", Batch: 1, Change: si.FleetCounts{Calls: 2, Failures: 1}}}
		type res struct {
			Again, Unavailable bool
			Pools              int
		}
		add := func(w *replica.Chain) res {
			pools, again, err := c.Add(w, d)
			return res{again, errors.Is(err, si.ErrFleetUnavailable), len(pools)}
		}
		var got []res
		f.refuse.Store(true)
		got = append(got, add(nil))
		f.refuse.Store(false)
		f.down.Store(true)
		got = append(got, add(nil))
		f.down.Store(false)
		w := replica.NewChain(time.Second)
		time.Sleep(950 * time.Millisecond)
		got = append(got, add(w), add(nil))
		want := []res{{false, true, 0}, {true, true, 0}, {true, true, 0}, {false, false, 1}}
		if !cmp.Equal(got, want) {
			t.Errorf("adds %+v, want %+v", got, want)
		}
		if c.Down() {
			t.Error("still down after the fleet answered an Add")
		}
		var loads []replica.Load
		load := func() {
			_, _, r, _ := c.Load(nil, "a", nil)
			loads = append(loads, r)
		}
		load()
		f.refuse.Store(true)
		load()
		f.refuse.Store(false)
		f.down.Store(true)
		load()
		f.down.Store(false)
		c.Up()
		loads = append(loads, func() replica.Load { _, _, r, _ := c.Load(w, "a", nil); return r }())
		if want := []replica.Load{replica.LoadOK, replica.LoadBad, replica.LoadDown, replica.LoadSlow}; !cmp.Equal(loads, want) {
			t.Errorf("loads %v, want %v", loads, want)
		}
	})
}

// TestClientLease: a lease held, busy or failed is counted as such; the
// fleet's answer brings it back (Up), a failure does not; a chain whose
// time is spent tries nothing and counts nothing. Release does not try
// while the fleet is down, and asks the flusher to give the lease back
// (false) when the chain's time is spent.
func TestClientLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Fleet: fleettest.New(nil)}
		c1, h := newClient(t, "r1", f)
		c2, _ := newClient(t, "r2", f)
		type res struct {
			Held bool
			Err  error
		}
		lease := func(c *client, w *replica.Chain) res {
			ok, err := c.Lease(w, "a", time.Minute, nil)
			switch {
			case errors.Is(err, replica.ErrSlow):
				err = replica.ErrSlow
			case errors.Is(err, si.ErrFleetUnavailable):
				err = si.ErrFleetUnavailable
			case err != nil:
				err = replica.ErrRefused // a refusal
			}
			return res{ok, err}
		}
		got := []res{lease(c1, nil), lease(c2, nil)}
		f.refuse.Store(true)
		got = append(got, lease(c1, nil))
		f.refuse.Store(false)
		f.down.Store(true)
		got = append(got, lease(c1, nil))
		if r := c1.Release(nil, "a", nil); !r {
			t.Error("Release while down: false, want true (not tried: the lease expires)")
		}
		f.down.Store(false)
		w := replica.NewChain(time.Second)
		time.Sleep(950 * time.Millisecond)
		got = append(got, lease(c1, w))
		if said := h.take(); len(said) != 1 || said[0] != "down" {
			t.Errorf("hooks told %q before the fleet answered, want [down]", said)
		}
		got = append(got, lease(c1, nil)) // the fleet answers: back
		if c1.Release(w, "a", nil) {
			t.Error("Release on a spent chain: true, want false (the flusher gives it back)")
		}
		if !c1.Release(nil, "a", nil) {
			t.Error("Release: false, want true")
		}
		got = append(got, lease(c2, nil)) // released: r2 takes it
		want := []res{{true, nil}, {false, nil}, {false, replica.ErrRefused}, {false, si.ErrFleetUnavailable},
			{false, replica.ErrSlow}, {true, nil}, {true, nil}}
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return a == b })); d != "" {
			t.Errorf("leases (-want +got):\n%s", d)
		}
		if said := h.take(); len(said) != 1 || said[0] != "back" {
			t.Errorf("hooks told %q after the answer, want [back]", said)
		}
		n := func(v *atomic.Int64) int64 { return v.Load() }
		if g := []int64{n(&c1.Counts.Leases), n(&c1.Counts.LeasesBusy), n(&c1.Counts.LeaseErrors), n(&c2.Counts.LeasesBusy)}; !cmp.Equal(g, []int64{2, 0, 2, 1}) {
			t.Errorf("r1 leases, busy, errors, r2 busy: %v, want [2 0 2 1]", g)
		}
	})
}

// TestClientCut: an operation given what its chain had left, at most
// half the fleet timeout, that gets no answer by its deadline says the
// fleet answers slowly (ErrSlow, an error counted, no outage); the first
// operation of a chain that gets no answer in the whole timeout is an
// outage.
func TestClientCut(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		f.hang.Store(true)
		w := replica.NewChain(time.Second)
		time.Sleep(600 * time.Millisecond) // 400 ms left: a short operation
		out, _, err := c.Commit(w, "a", 0, []byte("{}"), func() {}, nil)
		if out != replica.Unreachable || !errors.Is(err, replica.ErrSlow) || c.Down() || c.Counts.Errors.Load() != 1 {
			t.Errorf("a short commit cut: %v, %v, down %v, errors %d; want Unreachable, ErrSlow, not down, 1", out, err, c.Down(), c.Counts.Errors.Load())
		}
		out, _, err = c.Commit(nil, "a", 0, []byte("{}"), func() {}, nil)
		if out != replica.Unreachable || errors.Is(err, replica.ErrSlow) || !c.Down() {
			t.Errorf("a whole timeout without an answer: %v, %v, down %v; want Unreachable, not slow, down", out, err, c.Down())
		}
		if said := h.take(); !cmp.Equal(said, []string{"down"}) {
			t.Errorf("hooks told %q, want [down]", said)
		}
	})
}

// TestClientUpOn: which answers of the fleet count toward the end of an
// outage (Up): those of a commit (landed or in conflict), a lease, an
// Add, a load (and a View) and the events sent; not a release, a note, a
// read of notes or the replica's own note, whose callers decide (a
// flush's read of the dead routes does). Each op runs once the fleet is
// back, Settle after its first answer: the outage ends with the op's
// answer, or not.
func TestClientUpOn(t *testing.T) {
	withClient(t, func(t *testing.T, f *faulty, c *client, h *hooks) {
		now := time.Now()
		ops := []struct {
			name string
			do   func()
			up   bool
		}{
			{"commit", func() { c.Commit(nil, "a", 0, []byte("{}"), func() {}, nil) }, true},
			{"conflict", func() { c.Commit(nil, "a", 0, []byte("{}"), func() {}, nil) }, true},
			{"lease", func() { c.Lease(nil, "a", time.Minute, nil) }, true},
			{"add", func() { c.Add(nil, []si.FleetDelta{{AgentID: "a", Replica: "r1"}}) }, true},
			{"load", func() { c.Load(nil, "a", nil) }, true},
			{"events", func() { c.LogEvents([]si.Event{{ID: "e"}}); c.SendEvents() }, true},
			{"view", func() { c.View(nil, "a") }, true},
			{"release", func() { c.Release(nil, "a", nil) }, false},
			{"release in a batch", func() { c.ReleaseIn(context.Background(), "a", nil) }, false},
			{"note", func() {
				c.SendNotes(now, []replica.Note{{Kind: "cause", Name: "x", Until: now.Add(time.Hour), Now: now}})
			}, false},
			{"read", func() { c.Read("cause", now) }, false},
			{"seen", func() { c.SeenNow(); c.Seen(time.Now()) }, false},
		}
		for _, op := range ops {
			c.Failed(si.ErrFleetUnavailable, "", nil)
			c.Up()
			time.Sleep(replica.Settle)
			h.take()
			op.do()
			said := h.take()
			if over := len(said) == 1 && strings.HasPrefix(said[0], "up after"); over != op.up {
				t.Errorf("%s answered: the outage over %v (hooks told %q), want %v", op.name, over, said, op.up)
			}
			c.Up() // ends the outage before the next op
		}
	})
}
