package replica

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// What a Client sends besides an agent's state and counts: notes (dead
// routes, account-wide causes, this replica alive), read back by every
// replica, and the events of the fleet's log. Both wait in bounded
// outboxes for the flusher, never on the call path; each operation is
// bounded by the fleet timeout.

// Note is a note waiting to be sent (Fleet.Note).
type Note struct {
	Kind, Name, Reason string
	Until, Now         time.Time
	// Then, when set, is told once the note was sent, at the time now
	// of the flush that sent it, whether a note of its kind and name was
	// in force (was), or the error that kept the fleet from saying.
	Then func(now time.Time, was bool, err error)
}

// Post queues the note n for the flusher, and asks for a flush. It
// reports false when the outbox is full.
func (c *Client[D, P, E, N]) Post(n Note) bool {
	ok := c.notes.Push(n)
	c.Kick()
	return ok
}

// SendNotes sends the notes posted, then more, each under the fleet
// timeout, and tells each its answer (Note.Then), at now, the flush's
// time. FlushMu is held.
func (c *Client[D, P, E, N]) SendNotes(now time.Time, more []Note) {
	for _, n := range append(c.notes.Take(), more...) {
		ctx, cancel := c.Ctx()
		var was bool
		err := guard("Note", func() (err error) { was, err = c.Fleet.Note(ctx, n.Kind, n.Name, n.Reason, n.Until, n.Now); return err })
		cancel()
		if err != nil {
			c.Failed(err, "", nil)
		}
		if n.Then != nil {
			n.Then(now, was, err)
		}
	}
}

// Read returns the notes of kind in force at now; false when the fleet
// did not answer (reported: Failed).
func (c *Client[D, P, E, N]) Read(kind string, now time.Time) ([]N, bool) {
	ctx, cancel := c.Ctx()
	var notes []N
	err := guard("Notes", func() (err error) { notes, err = c.Fleet.Notes(ctx, kind, now); return err })
	cancel()
	if err != nil {
		c.Failed(err, "", nil)
		return nil, false
	}
	return notes, true
}

// The replicas seen: each replica tells the fleet it is alive with a note
// of kind "replica" named after it, every ReplicaEvery and until
// ReplicaTTL later, and reads the others' notes on the same cadence, from
// the flusher. Close ends its note; a replica that died without Close
// drops out when its note ends.
const (
	// NoteReplica is the kind of a replica's note.
	NoteReplica = "replica"
	// ReplicaEvery is how often a replica notes itself and reads the
	// replicas seen.
	ReplicaEvery = 5 * time.Second
	// ReplicaTTL is how long a replica's note lasts without a renewal:
	// four renewals missed.
	ReplicaTTL = 20 * time.Second
)

// book is the replicas seen.
type book[N any] struct {
	at   time.Time           // the last note; guarded by FlushMu
	seen atomic.Pointer[[]N] // the latest read
	now  atomic.Bool         // the next flush notes and reads at once (SeenNow)
}

// Seen notes this replica in the fleet, and reads the replicas seen,
// when ReplicaEvery has passed since it last did (or SeenNow asked).
// FlushMu is held.
func (c *Client[D, P, E, N]) Seen(now time.Time) {
	b := &c.book
	if !b.now.Swap(false) && !b.at.IsZero() && !now.Before(b.at) && now.Sub(b.at) < ReplicaEvery {
		return
	}
	b.at = now
	ctx, cancel := c.Ctx()
	err := guard("Note", func() (err error) {
		_, err = c.Fleet.Note(ctx, NoteReplica, c.Name, "", now.Add(ReplicaTTL), now)
		return err
	})
	cancel()
	if err != nil {
		c.Failed(err, "", nil)
		return
	}
	if seen, ok := c.Read(NoteReplica, now); ok {
		b.seen.Store(&seen)
	}
}

// SeenNow has the next flush note this replica and read the replicas
// seen, whenever it last did.
func (c *Client[D, P, E, N]) SeenNow() { c.book.now.Store(true) }

// Gone ends this replica's note; not while the replica backs off (its
// note then ends on its own, ReplicaTTL after the last).
func (c *Client[D, P, E, N]) Gone() {
	if c.Down() {
		return
	}
	now := c.hooks.Now()
	ctx, cancel := c.Ctx()
	defer cancel()
	guard("Note", func() (err error) { _, err = c.Fleet.Note(ctx, NoteReplica, c.Name, "", now, now); return err })
}

// Replicas returns the replicas seen alive at now, by name, with when
// each last told the fleet it was alive; nil before the first read.
func (c *Client[D, P, E, N]) Replicas(now time.Time) map[string]time.Time {
	seen := c.book.seen.Load()
	if seen == nil {
		return nil
	}
	out := make(map[string]time.Time, len(*seen))
	for _, r := range *seen {
		if name, until := c.noteOf(r); until.After(now) {
			out[name] = until.Add(-ReplicaTTL)
		}
	}
	return out
}

// ReplicasSeen counts the replicas seen alive at now.
func (c *Client[D, P, E, N]) ReplicasSeen(now time.Time) (n int64) {
	if seen := c.book.seen.Load(); seen != nil {
		for _, r := range *seen {
			if _, until := c.noteOf(r); until.After(now) {
				n++
			}
		}
	}
	return n
}

// LogEvents queues events for the fleet's log, sent by the next flush
// (SendEvents), and asks for one; beyond the outbox's bound the oldest
// are dropped (counted and logged).
func (c *Client[D, P, E, N]) LogEvents(evs []E) {
	if len(evs) == 0 {
		return
	}
	if n := c.events.PushDrop(evs...); n > 0 {
		c.Counts.Errors.Add(1)
		c.log.Error("selfimprove: events for the fleet's log dropped: the fleet has not taken them", "count", n)
	}
	c.Kick()
}

// SendEvents sends the queued events to the fleet's log; while the
// fleet cannot be reached they wait for the next flush, a refusal drops
// them. FlushMu is held.
func (c *Client[D, P, E, N]) SendEvents() {
	evs := c.events.Take()
	if len(evs) == 0 || c.Down() {
		c.events.Requeue(evs)
		return
	}
	ctx, cancel := c.Ctx()
	err := guard("AppendEvents", func() error { return c.Fleet.AppendEvents(ctx, evs) })
	cancel()
	switch {
	case err == nil:
		c.Up()
	case errors.Is(err, ErrUnavailable):
		c.Failed(err, "", nil)
		c.events.Requeue(evs)
	default:
		c.Failed(fmt.Errorf("cannot add %d events to the fleet's log: %w", len(evs), err), "", nil)
	}
}
