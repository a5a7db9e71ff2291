package replica

import "sync/atomic"

// Deltas numbers one agent's count deltas on one replica, so that the
// fleet books each once (the fleet remembers each replica's latest
// number and only reads a number it booked), and keeps the delta whose
// answer was lost, to send it again unchanged before any newer count: the
// fleet may have booked it. Its methods are pure; the driver holds the
// agent's lock around each, and sends one delta of the agent at a time
// (the flusher's lock). D is the driver's delta.
type Deltas[D any] struct {
	batch   uint64
	pending *D
}

// Pending returns the delta whose answer was lost, to send again as it
// was; nil: none.
func (q *Deltas[D]) Pending() *D { return q.pending }

// Next numbers a new delta (its calls taken from the replica's tally):
// the next number of seq, which numbers the replica's deltas of every
// agent in one rising sequence: an agent evicted and loaded again goes
// on from a number above its last, where numbers of its own, from 1
// again, would be taken by the fleet for those it booked, and dropped.
func (q *Deltas[D]) Next(seq *atomic.Uint64) uint64 {
	q.batch = seq.Add(1)
	return q.batch
}

// Answered takes the fleet's answer to d: lost (no answer, or none in
// time) keeps it to send again; booked, or refused (it would be refused
// again: its counts go), drops it.
func (q *Deltas[D]) Answered(d D, lost bool) {
	q.pending = nil
	if lost {
		q.pending = &d
	}
}

// Keep takes d as the delta to send again: that of an agent evicted
// while it waited, given to the agent's new link when it is loaded again.
func (q *Deltas[D]) Keep(d D) { q.pending = &d }
