package replica

import "sync"

// Queue is a bounded queue of what waits for the flusher to send to the
// fleet: events for the fleet's log, notes, leases to give back. Safe
// for concurrent use; the zero value, with Max set, is empty.
type Queue[T any] struct {
	// Max bounds the items waiting; what happens past it is the
	// caller's choice (Push refuses, PushDrop drops the oldest).
	Max   int
	mu    sync.Mutex
	items []T
}

// Push queues v, and reports false (v not queued) when the queue is
// full.
func (q *Queue[T]) Push(v T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= q.Max {
		return false
	}
	q.items = append(q.items, v)
	return true
}

// PushDrop queues vs, dropping the oldest items past Max; it returns how
// many it dropped.
func (q *Queue[T]) PushDrop(vs ...T) (dropped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, vs...)
	if n := len(q.items) - q.Max; n > 0 {
		q.items = append(q.items[:0], q.items[n:]...)
		return n
	}
	return 0
}

// Take returns the items queued, oldest first, and empties the queue.
func (q *Queue[T]) Take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// Requeue puts vs (from Take) back before the items queued since,
// dropping the oldest past Max.
func (q *Queue[T]) Requeue(vs []T) {
	if len(vs) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(vs, q.items...)
	if n := len(q.items) - q.Max; n > 0 {
		q.items = q.items[n:]
	}
}
