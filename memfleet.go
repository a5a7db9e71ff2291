package selfimprove

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// MemoryFleet is a Fleet in process memory, for Loops in one process (and
// for tests). It is synchronous: a commit reaches every subscriber before
// Commit returns, so what one Loop decides is in force on the others on
// their next call. Its lease expiry reads the clock given to
// NewMemoryFleetClock (default: the system clock). It keeps the latest
// MemoryFleetEvents events.
type MemoryFleet struct {
	clock Clock

	mu     sync.Mutex
	agents map[string]*memFleetAgent
	events []Event
	subs   map[int]func(string, uint64)
	nextID int
}

// MemoryFleetEvents is how many events a MemoryFleet keeps.
const MemoryFleetEvents = 10_000

type memFleetAgent struct {
	rev        uint64
	value      []byte
	gen        uint64 // the generation counted below
	change     FleetCounts
	control    FleetCounts
	total      FleetCounts
	failures   []FleetFailure // the latest, at most MaxFleetFailures
	seq        uint64
	lease      string
	leaseUntil time.Time
}

// NewMemoryFleet returns an empty MemoryFleet on the system clock.
func NewMemoryFleet() *MemoryFleet { return NewMemoryFleetClock(nil) }

// NewMemoryFleetClock returns an empty MemoryFleet whose leases expire by
// c (nil: the system clock).
func NewMemoryFleetClock(c Clock) *MemoryFleet {
	if c == nil {
		c = realClock{}
	}
	return &MemoryFleet{clock: c, agents: map[string]*memFleetAgent{}, subs: map[int]func(string, uint64){}}
}

func (m *MemoryFleet) agent(id string) *memFleetAgent {
	a := m.agents[id]
	if a == nil {
		a = &memFleetAgent{}
		m.agents[id] = a
	}
	return a
}

// Load returns agentID's shared state and revision.
func (m *MemoryFleet) Load(ctx context.Context, agentID string) (uint64, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
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
func (m *MemoryFleet) Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	a := m.agent(agentID)
	if a.rev != rev {
		cur := a.rev
		m.mu.Unlock()
		return 0, fmt.Errorf("%w: agent %q is at revision %d, not %d", ErrFleetConflict, agentID, cur, rev)
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
func (m *MemoryFleet) Add(ctx context.Context, deltas []FleetDelta) ([]FleetPool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]FleetPool, len(deltas))
	for i, d := range deltas {
		a := m.agent(d.AgentID)
		if d.Gen > a.gen {
			a.gen, a.change, a.control = d.Gen, FleetCounts{}, FleetCounts{}
		}
		a.total.Add(d.Change)
		a.total.Add(d.Control)
		for _, f := range d.Failures[:min(len(d.Failures), MaxFleetFailures)] {
			a.seq++
			f.Seq, f.Replica = a.seq, d.Replica
			f.Text = failure.Bound(f.Text, failure.MaxText)
			a.failures = appendBounded(a.failures, f, MaxFleetFailures)
		}
		p := FleetPool{Rev: a.rev, Gen: d.Gen, Total: a.total, Failures: slices.Clone(a.failures)}
		if d.Gen == a.gen {
			a.change.Add(d.Change)
			a.control.Add(d.Control)
			p.Change, p.Control = a.change, a.control
		}
		out[i] = p
	}
	return out, nil
}

// Lease gives agentID's lease to owner for ttl.
func (m *MemoryFleet) Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
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
func (m *MemoryFleet) Release(ctx context.Context, agentID, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.agents[agentID]; a != nil && a.lease == owner {
		a.lease = ""
	}
	return nil
}

// Subscribe calls f after each commit, on the committing goroutine.
func (m *MemoryFleet) Subscribe(f func(agentID string, rev uint64)) (stop func()) {
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
// MemoryFleetEvents.
func (m *MemoryFleet) AppendEvents(ctx context.Context, events []Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, events...)
	if n := len(m.events); n > MemoryFleetEvents {
		m.events = slices.Clone(m.events[n-MemoryFleetEvents:])
	}
	return nil
}

// Events returns up to limit of the latest events, oldest first.
func (m *MemoryFleet) Events(ctx context.Context, limit int) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := min(max(limit, 0), len(m.events))
	return slices.Clone(m.events[len(m.events)-n:]), nil
}

var _ Fleet = (*MemoryFleet)(nil)
