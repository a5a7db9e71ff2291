// Package fleettest holds an in-process Fleet, for several Loops in one
// process and for tests, as net/http/httptest holds a server: Loops that
// share a fleettest.Fleet learn together exactly as replicas sharing
// Redis do (see the redisfleet module), with no network.
package fleettest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	si "github.com/self-improving-loop/selfimprove"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Fleet is a selfimprove.Fleet in process memory. It is synchronous: a
// commit reaches every subscriber before Commit returns, so what one Loop
// decides is in force on the others on their next call. Its lease expiry
// reads the clock given to New (default: the system clock). It keeps the
// latest MaxEvents events.
type Fleet struct {
	clock si.Clock

	mu     sync.Mutex
	agents map[string]*memFleetAgent
	events []si.Event
	subs   map[int]func(string, uint64)
	nextID int
	notes  map[noteKey]memNote
}

// MaxEvents is how many events a Fleet keeps.
const MaxEvents = 10_000

type memFleetAgent struct {
	rev        uint64
	value      []byte
	gen        uint64 // the generation counted below
	change     si.FleetCounts
	control    si.FleetCounts
	total      si.FleetCounts
	failures   []si.FleetFailure // the latest, at most si.MaxFleetFailures
	seq        uint64
	lease      string
	leaseUntil time.Time
	batches    map[string]uint64 // each replica's latest numbered delta booked
	stats      []byte            // the Stats of the last delta booked with some
}

// New returns an empty Fleet whose leases expire by c (nil: the system
// clock).
func New(c si.Clock) *Fleet {
	if c == nil {
		c = systemClock{}
	}
	return &Fleet{clock: c, agents: map[string]*memFleetAgent{}, subs: map[int]func(string, uint64){}}
}

func (m *Fleet) agent(id string) *memFleetAgent {
	a := m.agents[id]
	if a == nil {
		a = &memFleetAgent{}
		m.agents[id] = a
	}
	return a
}

// Load returns agentID's shared state and revision.
func (m *Fleet) Load(ctx context.Context, agentID string) (uint64, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agents[agentID]
	if a == nil || a.rev == 0 {
		return 0, nil, nil
	}
	return a.rev, slices.Clone(a.value), nil
}

// Commit stores value if agentID's revision is still rev, then tells the
// subscribers.
func (m *Fleet) Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, unavailable(err)
	}
	m.mu.Lock()
	a := m.agent(agentID)
	if a.rev != rev {
		cur := a.rev
		m.mu.Unlock()
		return 0, fmt.Errorf("%w: agent %q is at revision %d, not %d", si.ErrFleetConflict, agentID, cur, rev)
	}
	a.rev++
	a.value = slices.Clone(value)
	nrev := a.rev
	subs := make([]func(string, uint64), 0, len(m.subs))
	for _, k := range slices.Sorted(maps.Keys(m.subs)) {
		subs = append(subs, m.subs[k])
	}
	m.mu.Unlock()
	for _, f := range subs {
		f(agentID, nrev)
	}
	return nrev, nil
}

// Add adds the deltas and returns the pooled counts.
func (m *Fleet) Add(ctx context.Context, deltas []si.FleetDelta) ([]si.FleetPool, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]si.FleetPool, len(deltas))
	for i, d := range deltas {
		a := m.agent(d.AgentID)
		if d.Batch != 0 {
			if a.batches[d.Replica] >= d.Batch {
				d = si.FleetDelta{AgentID: d.AgentID, Gen: d.Gen} // booked already: only read
			} else {
				if a.batches == nil {
					a.batches = map[string]uint64{}
				}
				a.batches[d.Replica] = d.Batch
			}
		}
		if d.Gen > a.gen {
			a.gen, a.change, a.control = d.Gen, si.FleetCounts{}, si.FleetCounts{}
		}
		if d.Stats != nil {
			a.stats = slices.Clone(d.Stats)
		}
		a.total.Add(d.Change)
		a.total.Add(d.Control)
		for _, f := range d.Failures[:min(len(d.Failures), si.MaxFleetFailures)] {
			a.seq++
			f.Seq, f.Replica = a.seq, d.Replica
			f.Text = failure.Bound(f.Text, failure.MaxText)
			if len(a.failures) == si.MaxFleetFailures {
				a.failures = slices.Delete(a.failures, 0, 1)
			}
			a.failures = append(a.failures, f)
		}
		p := si.FleetPool{Rev: a.rev, Gen: d.Gen, Total: a.total, Failures: slices.Clone(a.failures)}
		if d.Gen == a.gen {
			a.change.Add(d.Change)
			a.control.Add(d.Control)
			p.Change, p.Control = a.change, a.control
		}
		out[i] = p
	}
	return out, nil
}

// LoadStats returns the Stats of agentID's delta booked last.
func (m *Fleet) LoadStats(ctx context.Context, agentID string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.agents[agentID]; a != nil {
		return slices.Clone(a.stats), nil
	}
	return nil, nil
}

// Lease gives agentID's lease to owner for ttl.
func (m *Fleet) Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agent(agentID)
	if a.lease != "" && a.lease != owner && now.Before(a.leaseUntil) {
		return false, nil
	}
	a.lease, a.leaseUntil = owner, now.Add(ttl)
	return true, nil
}

// Release ends owner's lease of agentID.
func (m *Fleet) Release(ctx context.Context, agentID, owner string) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.agents[agentID]; a != nil && a.lease == owner {
		a.lease = ""
	}
	return nil
}

// Subscribe calls f after each commit, on the committing goroutine.
func (m *Fleet) Subscribe(f func(agentID string, rev uint64)) (stop func()) {
	m.mu.Lock()
	id := m.nextID
	m.nextID++
	m.subs[id] = f
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
	}
}

// AppendEvents adds events to the log, which keeps the latest
// MaxEvents.
func (m *Fleet) AppendEvents(ctx context.Context, events []si.Event) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, events...)
	if n := len(m.events); n > MaxEvents {
		m.events = slices.Clone(m.events[n-MaxEvents:])
	}
	return nil
}

// Events returns up to limit of the latest events, oldest first.
func (m *Fleet) Events(ctx context.Context, limit int) ([]si.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := min(max(limit, 0), len(m.events))
	return slices.Clone(m.events[len(m.events)-n:]), nil
}

var _ si.Fleet = (*Fleet)(nil)

// systemClock is the system clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// unavailable wraps a context's error: the fleet could not be reached in
// time.
func unavailable(err error) error {
	return fmt.Errorf("fleettest: %w: %w", si.ErrFleetUnavailable, err)
}
