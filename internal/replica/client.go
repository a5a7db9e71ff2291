package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Fleet is what a Client talks to: the root package's Fleet interface, in
// the root's types (selfimprove.Fleet is a Fleet[FleetDelta, FleetPool,
// Event, DeadRoute]). D is one replica's counts of an agent, P the fleet's
// pooled answer to one, E an event of the fleet's log, N a note read back.
// Its methods' contract is the root's (docs/fleet.md).
type Fleet[D, P, E, N any] interface {
	Load(ctx context.Context, agentID string) (rev uint64, value []byte, err error)
	Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error)
	Add(ctx context.Context, deltas []D) ([]P, error)
	LoadStats(ctx context.Context, agentID string) ([]byte, error)
	Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, agentID, owner string) error
	Subscribe(f func(agentID string, rev uint64)) (stop func())
	AppendEvents(ctx context.Context, events []E) error
	Events(ctx context.Context, limit int) ([]E, error)
	Note(ctx context.Context, kind, name, reason string, until, now time.Time) (was bool, err error)
	Notes(ctx context.Context, kind string, now time.Time) ([]N, error)
}

// Hooks is what a Client asks of the Loop it serves: the seam between
// the transport and the core. Flush is called with no lock of the
// Client's held; Back and Outage, and a Note's Then, may be called with
// FlushMu held (from a flush's operations), and must not take it.
type Hooks interface {
	// Now reads the Loop's clock.
	Now() time.Time
	// Flush is the Loop's flush: the flusher runs it every interval, when
	// kicked, and once more at Close.
	Flush() error
	// Back is told that the fleet answered after it was down: every live
	// agent is to be compared with the fleet's state (the Client kicks a
	// flush after it).
	Back()
	// Outage is told that an outage began, with its first failure err, or
	// that it ended (err nil) after d: the Loop records and hands on an
	// event (EventFleetUnreachable, EventFleetRecovered).
	Outage(now time.Time, err error, d time.Duration)
}

// Counts is what a Client counted, for the Loop's Metrics; each field is
// the Metrics field of the same name with "Fleet" before it.
type Counts struct {
	Errors, Outages, Conflicts      atomic.Int64
	Commits, CommitNS, CommitMaxNS  atomic.Int64
	Leases, LeasesBusy, LeaseErrors atomic.Int64
	Lag, Behind                     atomic.Int64
}

// Config is what NewClient needs.
type Config[D, P, E, N any] struct {
	Fleet Fleet[D, P, E, N]
	// Name is this replica's name in the fleet.
	Name string
	// Timeout is the fleet time of one chain of operations (Link).
	Timeout time.Duration
	// Interval is how often the flusher flushes (0: only when kicked).
	Interval time.Duration
	Hooks    Hooks
	Log      *slog.Logger
	// NoteOf reads a note read back: its name and its end.
	NoteOf func(N) (name string, until time.Time)
	// MaxEvents and MaxNotes bound the outboxes of events and notes.
	MaxEvents, MaxNotes int
}

// Client is one replica's connection to its fleet, which knows nothing of
// the Loop but its Hooks: the fleet time and the outage under way (Link),
// the flusher's goroutine, the fleet's operations with their answers as
// values (Commit, Load, Add, Lease, Release), the outboxes of events
// and notes, and the replicas seen (the book). It is safe for concurrent
// use.
type Client[D, P, E, N any] struct {
	Link
	// Fleet is the fleet; Name this replica's name in it.
	Fleet Fleet[D, P, E, N]
	Name  string
	// FlushMu serialises flushes.
	FlushMu SaveLock
	// Counts is what the Client counted.
	Counts Counts

	hooks    Hooks
	log      *slog.Logger
	noteOf   func(N) (string, time.Time)
	interval time.Duration

	kick, stop, done chan struct{}
	unsub            func()
	once             sync.Once
	// manual: the flusher leaves a kick to the next flush (Flush's
	// caller, the interval), so that a test's schedule says when every
	// flush runs.
	manual atomic.Bool
	badAt  atomic.Int64 // Unix ns: the last report of an invalid answer not an agent's

	events Queue[E]
	notes  Queue[Note]
	book   book[N]
}

// NewClient returns a Client of cfg; Start starts it.
func NewClient[D, P, E, N any](cfg Config[D, P, E, N]) *Client[D, P, E, N] {
	return &Client[D, P, E, N]{
		Link: Link{Timeout: cfg.Timeout}, Fleet: cfg.Fleet, Name: cfg.Name,
		hooks: cfg.Hooks, log: cfg.Log, noteOf: cfg.NoteOf, interval: cfg.Interval,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		events: Queue[E]{Max: cfg.MaxEvents}, notes: Queue[Note]{Max: cfg.MaxNotes},
	}
}

// Start subscribes notified to the fleet's notifications and starts the
// flusher. A panic in Subscribe is taken as the fleet's failure (Failed): the
// replica then learns of other replicas' commits by its poll alone.
func (c *Client[D, P, E, N]) Start(notified func(agentID string, rev uint64)) {
	err := guard("Subscribe", func() error { c.unsub = c.Fleet.Subscribe(notified); return nil })
	if c.unsub == nil {
		c.unsub = func() {}
	}
	if err != nil {
		c.Failed(err, "", nil)
	}
	go c.run()
}

// Close stops the flusher, flushes once more (Hooks.Flush), ends this
// replica's note (Gone) and unsubscribes; it returns the flush's error,
// joined with a panic of the unsubscription's (guard). It is idempotent.
func (c *Client[D, P, E, N]) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		err = c.hooks.Flush()
		c.Gone()
		if uerr := guard("stop (of Subscribe)", func() error { c.unsub(); return nil }); uerr != nil {
			c.Counts.Errors.Add(1)
			err = errors.Join(err, uerr)
		}
	})
	return err
}

// Manual has the flusher leave kicks to the next flush of the interval
// or of the Loop (a test's schedule owns every flush).
func (c *Client[D, P, E, N]) Manual() { c.manual.Store(true) }

// Ctx returns a context bounded by the fleet timeout.
func (c *Client[D, P, E, N]) Ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.Timeout)
}

// run flushes every interval, or when kicked, until Close.
func (c *Client[D, P, E, N]) run() {
	defer close(c.done)
	var tick <-chan time.Time
	if c.interval > 0 {
		t := time.NewTicker(c.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
		case <-c.kick:
			if c.manual.Load() {
				continue
			}
		case <-c.stop:
			return
		}
		c.hooks.Flush()
	}
}

// Kick asks the flusher for a flush now.
func (c *Client[D, P, E, N]) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// BadEvery is how often invalid data of one agent in the fleet (or of
// none) is logged; Counts.Errors counts every time.
const BadEvery = time.Minute

// Settle is how long the fleet must answer after a failure for an outage
// to be over (Hooks.Outage); a failure within it belongs to the same
// outage.
const Settle = time.Second

// Failed takes an error of the fleet's about the agent id ("": of no
// agent) whose reports are timed by at (nil: the Client's own): the
// fleet answers slowly (counted), could not be reached (an outage), or
// refused or held invalid data (Bad).
func (c *Client[D, P, E, N]) Failed(err error, id string, at *atomic.Int64) {
	switch {
	case errors.Is(err, ErrSlow):
		c.Counts.Errors.Add(1) // the fleet answers slowly: not down (see Cut)
	case errors.Is(err, ErrUnavailable):
		c.wentDown(err)
	default:
		c.Bad(err, id, at)
	}
}

// Bad reports an answer of the fleet that is no outage: invalid data of
// the agent id ("": of no agent), set aside or to be replaced, or a
// refusal. It logs at most once per BadEvery per at (nil: the Client's).
func (c *Client[D, P, E, N]) Bad(err error, id string, at *atomic.Int64) {
	c.Counts.Errors.Add(1)
	if at == nil {
		at = &c.badAt
	}
	now, last := c.hooks.Now().UnixNano(), at.Load()
	if last != 0 && now-last < int64(BadEvery) || !at.CompareAndSwap(last, now) {
		return
	}
	if id != "" {
		c.log.Error("selfimprove: the fleet refused, or holds invalid data for, the agent; its state is written again (reported once a minute)", "agent", id, "error", err)
	} else {
		c.log.Error("selfimprove: the fleet refused an operation, or answered with invalid data (reported once a minute)", "error", err)
	}
}

// wentDown notes that the fleet could not be reached: the replica backs
// off until the flusher finds it again. At the first failure of an
// outage, a log line and Hooks.Outage.
func (c *Client[D, P, E, N]) wentDown(err error) {
	c.Counts.Errors.Add(1)
	now := c.hooks.Now()
	if !c.Link.Failed(now.UnixNano()) {
		return // backing off already, or the fleet had not answered for Settle since the last failure
	}
	c.Counts.Outages.Add(1)
	c.log.Error("selfimprove: fleet unreachable: calls keep their configs, and no change is applied until it is back", "error", err)
	c.hooks.Outage(now, err, 0)
}

// Up notes that the fleet answered: after it was down, Hooks.Back and a
// flush; once it has answered for Settle, the outage is over, with a log
// line and Hooks.Outage.
func (c *Client[D, P, E, N]) Up() {
	now := c.hooks.Now()
	back, over, d := c.Answered(now.UnixNano(), Settle)
	if back {
		c.hooks.Back()
		c.Kick()
		return
	}
	if !over {
		return
	}
	d = d.Round(time.Millisecond)
	c.log.Info("selfimprove: fleet reachable again; resynchronised", "outage", d)
	c.hooks.Outage(now, nil, d)
}

// guard runs f, a call of the fleet's method op, and returns its error. A
// panic in it (the Fleet is the user's) is recovered and returned as an
// error wrapping ErrUnavailable that names op and the panic: the
// operation failed as if the fleet could not be reached (whether it
// took effect is unknown, as with a lost answer), so the replica backs
// off and reports an outage, and the call, the flusher's goroutine and
// the locks held never see the panic.
func guard(op string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the fleet's %s panicked: %v", ErrUnavailable, op, r)
		}
	}()
	return f()
}

// answer takes the answer err of an operation on the fleet about the
// agent id (at as in Failed): Up when it answered, Failed when not.
func (c *Client[D, P, E, N]) answer(err error, id string, at *atomic.Int64) {
	if err == nil {
		c.Up()
	} else {
		c.Failed(err, id, at)
	}
}

// ErrRefused: the fleet answered a commit with an error that is no
// outage (a missing right, a script's error); the decision was taken
// back.
var ErrRefused = errors.New("selfimprove: the fleet refused the decision")

// Commit commits value as agentID's state at rev, as an operation of the
// chain w, and returns its outcome as a value, with the new revision when
// it Landed and the error to report (wrapping ErrConflict, ErrUnavailable
// or ErrRefused) when not; sending is called just before the commit is
// sent (not when it is NotSent). The answer is taken (answer) and
// counted.
func (c *Client[D, P, E, N]) Commit(w *Chain, agentID string, rev uint64, value []byte, sending func(), at *atomic.Int64) (Outcome, uint64, error) {
	if c.Down() {
		// Backing off until the flusher finds the fleet again: taken back at once.
		return NotSent, 0, fmt.Errorf("%w: backing off since the last failure", ErrUnavailable)
	}
	ctx, done, ok := c.Op(w)
	if !ok {
		return NotSent, 0, ErrSlow // never sent: it cannot land
	}
	sending()
	start := c.hooks.Now()
	var nrev uint64
	err := guard("Commit", func() (err error) { nrev, err = c.Fleet.Commit(ctx, agentID, rev, value); return err })
	err = Cut(ctx, err)
	took := int64(c.hooks.Now().Sub(start))
	done()
	c.Counts.Commits.Add(1)
	c.Counts.CommitNS.Add(took)
	for m := c.Counts.CommitMaxNS.Load(); took > m && !c.Counts.CommitMaxNS.CompareAndSwap(m, took); m = c.Counts.CommitMaxNS.Load() {
	}
	switch {
	case err == nil:
		c.Up()
		return Landed, nrev, nil
	case errors.Is(err, ErrConflict):
		c.Up()
		c.Counts.Conflicts.Add(1)
		return Conflict, 0, fmt.Errorf("selfimprove: another replica decided first: %w", err)
	}
	c.Failed(err, agentID, at)
	if errors.Is(err, ErrUnavailable) {
		return Unreachable, 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return Refused, 0, fmt.Errorf("%w: %w", ErrRefused, err)
}

// loadResult returns what the error err of a load run under ctx (from
// Op) says, cut by the chain (Cut), and takes the answer (answer).
func (c *Client[D, P, E, N]) loadResult(ctx context.Context, err error, agentID string, at *atomic.Int64) (Load, error) {
	err = Cut(ctx, err)
	res := LoadOK
	switch {
	case err == nil:
	case errors.Is(err, ErrSlow):
		res = LoadSlow
	case errors.Is(err, ErrUnavailable):
		res = LoadDown
	default:
		res = LoadBad
	}
	c.answer(err, agentID, at)
	return res, err
}

// Lease asks for agentID's lease for ttl, as an operation of the chain
// w; it reports whether this replica holds it, and the error (an
// operation not tried: ErrSlow), counted and taken.
func (c *Client[D, P, E, N]) Lease(w *Chain, agentID string, ttl time.Duration, at *atomic.Int64) (bool, error) {
	ctx, done, ok := c.Op(w)
	if !ok {
		return false, ErrSlow
	}
	err := guard("Lease", func() (err error) { ok, err = c.Fleet.Lease(ctx, agentID, c.Name, ttl); return err })
	err = Cut(ctx, err)
	done()
	switch {
	case err != nil:
		c.Counts.LeaseErrors.Add(1)
		c.Failed(err, agentID, at)
		return false, err
	case ok:
		c.Counts.Leases.Add(1)
	default:
		c.Counts.LeasesBusy.Add(1)
	}
	c.Up()
	return ok, nil
}

// Release gives agentID's lease back, as an operation of the chain w
// (nil: within one fleet timeout); not when the fleet is down (it
// expires). It reports false when the chain's time was spent, or the
// fleet answered slowly: then the caller's flusher is to give it back.
func (c *Client[D, P, E, N]) Release(w *Chain, agentID string, at *atomic.Int64) (ok bool) {
	if c.Down() {
		return true
	}
	ctx, done, ok := c.Op(w)
	if !ok {
		return false
	}
	defer done()
	if err := Cut(ctx, guard("Release", func() error { return c.Fleet.Release(ctx, agentID, c.Name) })); err != nil {
		c.Failed(err, agentID, at)
		return !errors.Is(err, ErrSlow)
	}
	return true
}

// Add sends deltas in one Add, as an operation of the chain w (nil: one
// of its own), and returns the fleet's answer to each, in order. Its
// error, reported (Failed) unless the operation was not tried, wraps
// ErrUnavailable; again says the deltas are to be sent again as they
// are (the fleet could not be reached, or answered slowly), and is false
// when they would be refused again.
func (c *Client[D, P, E, N]) Add(w *Chain, deltas []D) (pools []P, again bool, err error) {
	err = ErrSlow
	if ctx, done, ok := c.Op(w); ok {
		err = guard("Add", func() (err error) { pools, err = c.Fleet.Add(ctx, deltas); return err })
		err = Cut(ctx, err)
		done()
	}
	if err == nil && len(pools) != len(deltas) {
		err = fmt.Errorf("selfimprove: fleet: %d answers to %d deltas", len(pools), len(deltas))
	}
	if err != nil {
		if err != ErrSlow { // not tried: no error of the fleet's
			c.Failed(err, "", nil)
		}
		return nil, errors.Is(err, ErrUnavailable), fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	c.Up()
	return pools, false, nil
}

// Load loads agentID's state, as an operation of the chain w (nil: one
// of its own), and returns it with what the answer says (LoadSlow when
// the chain's time was spent: not tried). The answer is taken (answer,
// at as in Failed).
func (c *Client[D, P, E, N]) Load(w *Chain, agentID string, at *atomic.Int64) (rev uint64, val []byte, res Load, err error) {
	return c.load(w, agentID, agentID, at)
}

// View loads agentID's state for a getter of an agent this replica does
// not run, as Load does; its failures are reported as no agent's (a
// replica that runs the agent reports, and replaces, an invalid state).
func (c *Client[D, P, E, N]) View(w *Chain, agentID string) (rev uint64, val []byte, res Load, err error) {
	return c.load(w, agentID, "", nil)
}

// load is Load, its answer reported as of the agent who ("": of none;
// at as in Failed).
func (c *Client[D, P, E, N]) load(w *Chain, agentID, who string, at *atomic.Int64) (rev uint64, val []byte, res Load, err error) {
	ctx, done, ok := c.Op(w)
	if !ok {
		return 0, nil, LoadSlow, ErrSlow
	}
	defer done()
	err = guard("Load", func() (err error) { rev, val, err = c.Fleet.Load(ctx, agentID); return err })
	res, err = c.loadResult(ctx, err, who, at)
	return rev, val, res, err
}

// ReleaseIn gives agentID's lease back under ctx, one of a batch that
// shares it (the flusher's); a failure is reported (Failed, at as there)
// and returned.
func (c *Client[D, P, E, N]) ReleaseIn(ctx context.Context, agentID string, at *atomic.Int64) error {
	err := guard("Release", func() error { return c.Fleet.Release(ctx, agentID, c.Name) })
	if err != nil {
		c.Failed(err, agentID, at)
	}
	return err
}

// LoadStats loads agentID's statistics, as an operation of the chain w;
// its error is the caller's to report (invalid statistics are reported
// apart). A chain whose time was spent gives ErrSlow.
func (c *Client[D, P, E, N]) LoadStats(w *Chain, agentID string) ([]byte, error) {
	ctx, done, ok := c.Op(w)
	if !ok {
		return nil, ErrSlow
	}
	var b []byte
	err := guard("LoadStats", func() (err error) { b, err = c.Fleet.LoadStats(ctx, agentID); return err })
	err = Cut(ctx, err)
	done()
	return b, err
}
