package admin

import (
	"context"
	"hash/maphash"
	"sync"
)

// outcomeIDs remembers the IDs of the outcomes the intake booked
// (Outcome.ID), the last Options.OutcomeIDs of them, so that an outcome
// sent again (its answer lost: a timeout, a dropped connection) is
// booked once. An ID is kept as a 64-bit hash of its agent and itself:
// two of 65,536 share a hash about once in 10^10 such windows.
type outcomeIDs struct {
	mu   sync.Mutex
	seed maphash.Seed
	max  int
	set  map[uint64]struct{} // the keys booked
	ring []uint64            // the keys booked, in order; next is the oldest once full
	next int
	// busy are the keys claimed whose outcome the loop is booking: a
	// request that sends one again waits for it.
	busy map[uint64]chan struct{}
}

// newOutcomeIDs returns a memory of the last max IDs (at least 1).
func newOutcomeIDs(max int) *outcomeIDs {
	return &outcomeIDs{seed: maphash.MakeSeed(), max: max, set: map[uint64]struct{}{}, busy: map[uint64]chan struct{}{}}
}

// claim claims agent's outcome id for booking, and returns its key, or
// dup when it was booked already. While another request is booking it,
// claim waits for that one; it returns ctx's error if ctx ends first. A
// claimed key must be given back with done.
func (m *outcomeIDs) claim(ctx context.Context, agent, id string) (k uint64, dup bool, err error) {
	var h maphash.Hash
	h.SetSeed(m.seed)
	h.WriteString(agent)
	h.WriteByte(0)
	h.WriteString(id)
	k = h.Sum64()
	for {
		m.mu.Lock()
		if _, ok := m.set[k]; ok {
			m.mu.Unlock()
			return k, true, nil
		}
		wait, ok := m.busy[k]
		if !ok {
			m.busy[k] = make(chan struct{})
			m.mu.Unlock()
			return k, false, nil
		}
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return k, false, ctx.Err()
		}
	}
}

// done gives back a claimed key: booked, it is remembered (forgetting
// the oldest when full); not booked, a request that sends it again
// books it.
func (m *outcomeIDs) done(k uint64, booked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.busy[k])
	delete(m.busy, k)
	if !booked {
		return
	}
	at := len(m.ring)
	if at < m.max {
		m.ring = append(m.ring, k)
	} else {
		at = m.next
		delete(m.set, m.ring[at])
		m.ring[at] = k
		m.next = (at + 1) % m.max
	}
	m.set[k] = struct{}{}
}
