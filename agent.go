package selfimprove

// This file is the agent wrapper the Loop drives: an agent's state, the
// config and counters its calls read without the lock, its event queue,
// and what runs under its lock around a transition (settle, publish,
// commit, reopen the fast path).

import (
	"sync"
	"sync/atomic"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// agent is one agent's live state: its agentState, and what the calls
// read without the lock.
type agent struct {
	id  string
	cfg atomic.Pointer[installed] // current config, immutable

	saveMu replica.SaveLock // serialises saves: held while snapshotting and writing

	slot int32 // index in the eviction ring; guarded by the ring's mu

	used atomic.Bool // called since the eviction hand last passed
	fast fastCounts  // successful calls booked without the lock

	mu      sync.Mutex // guards the fields below; held only for O(1) bookkeeping
	s       agentState
	dirty   bool // window counts changed since the last save
	evicted bool // removed from the registry: use a fresh agent
	// flags holds, read without the lock: flagGone, which mirrors
	// evicted for the front caches; flagProbing, set while a half-open
	// circuit's probe, or a probe of the primary route, runs; flagNests,
	// set once a failure of the agent looked passed on from a call nested
	// in it, so that its calls run under an attempt context from then on
	// (see callCtx). One word for the three keeps an agent within its
	// allocation size class (see TestAgentSizeClass).
	flags atomic.Uint32
	// openUntil mirrors s.CircuitOpenUntil for calls, which read it
	// without the lock.
	openUntil atomic.Int64
	pending   *eventQueue // events not yet logged, in decision order; nil when none
	fl        *fleetAgent // the agent's link to the fleet; nil without WithFleet

	tel *telemetry // calls by outcome and latency, for AgentView
}

// The bits of agent.flags.
const (
	flagGone uint32 = 1 << iota
	flagProbing
	flagNests
	// flagFellBack: the agent's last call answered only on the next
	// route, after a transient failure of its own (see Loop.fallBack).
	flagFellBack
	// flagCool: the agent's last call answered only on the next route
	// after its own route left an attempt without an answer (no response,
	// a stalled stream): calls skip that route until routeState.coolUntil
	// (see Loop.cooled).
	flagCool
)

// has reports whether a's flag f is set.
func (a *agent) has(f uint32) bool { return a.flags.Load()&f != 0 }

// set sets (on) or clears a's flag f.
func (a *agent) set(f uint32, on bool) {
	if on {
		a.flags.Or(f)
	} else {
		a.flags.And(^f)
	}
}

// claimProbe sets flagProbing if it was clear, and reports whether it did.
func (a *agent) claimProbe() bool { return a.flags.Or(flagProbing)&flagProbing == 0 }

// queued is an event waiting for the log; notified is set when the
// notifier already had it.
type queued struct {
	ev       *Event
	notified bool
	batch    *fleetBatch // the decision's, with a fleet (fleet_batch.go)
}

// eventQueue is an agent's events not yet logged. The agent holds it
// behind a pointer, nil but between a decision and its save, so that an
// agent stays within its allocation size class (see TestAgentSizeClass).
type eventQueue []queued

// queue adds q to a's events not yet logged. a.mu is held.
func (a *agent) queue(q queued) {
	if a.pending == nil {
		a.pending = new(eventQueue)
	}
	*a.pending = append(*a.pending, q)
}

// takeQueued returns a's events not yet logged, and empties the queue.
// a.mu is held.
func (a *agent) takeQueued() []queued {
	if a.pending == nil {
		return nil
	}
	evs := *a.pending
	a.pending = nil
	return evs
}

// installed is a config with the generation it was installed as. While a
// change is verified by MethodCanary, prev is the config before it, which
// the calls Loop.arm picks run; seq numbers those calls.
type installed struct {
	Config
	gen  uint64
	key  uint64 // the agent's key of call IDs (see callKeys), the same in every install
	prev *Config
	seq  atomic.Uint64
	home *string // the route to probe, while the agent is away from it
	// probeAt is when the next probe of home may run (Unix ns; 0: none).
	probeAt int64
}

// publishLocked publishes a's current config and generation to calls,
// with the previous config while a change is verified by MethodCanary.
func (a *agent) publishLocked(canary bool) {
	in := &installed{Config: a.s.Config.clone(), gen: a.s.Gen}
	if old := a.cfg.Load(); old != nil {
		in.key = old.key
	}
	if r := a.s.Route; r != nil && r.Away {
		h := r.Home
		in.home = &h
		if !r.Returning && (a.s.Verifying == nil || a.s.movingAway()) {
			in.probeAt = r.ProbeAt
		}
	}
	if v := a.s.Verifying; v != nil && canary {
		prev := v.From.clone()
		in.prev = &prev
	}
	a.cfg.Store(in)
}

// commitLocked carries out the effects that belong under a's lock:
// publishing the config, mirroring the circuit, and queueing the events
// in decision order. It returns the batch of a decision to save (with a
// fleet: fleet_batch.go; nil: none), which its caller gives the save.
func (a *agent) commitLocked(eff *effects, canary bool) (b *fleetBatch) {
	if eff.publish {
		a.publishLocked(canary)
	}
	if eff.probe && !eff.publish {
		a.publishLocked(canary) // the probe schedule moved
	}
	if eff.circuit {
		a.mirrorLocked()
	}
	if eff.save {
		b = a.decidedLocked()
	}
	for _, ev := range eff.events {
		a.queue(queued{ev: ev, batch: b})
	}
	return b
}

// mirrorLocked mirrors the circuit's deadline for calls. a.mu is held.
func (a *agent) mirrorLocked() {
	a.openUntil.Store(a.s.CircuitOpenUntil)
}

// settleLocked closes a's fast path and books the calls its counters
// hold into the tracker, as successes that ended just before now (Unix
// ns) and before the bucket they were booked in ended, and into the
// agent's metrics. a.mu is held.
func (a *agent) settleLocked(now int64) { a.settleAs(now, fastDrain) }

// sealLocked is settleLocked for an eviction: it seals the counters too
// (fastSeal), so that a call that found the path open and books late
// takes the locked path, and is booked on the agent loaded again rather
// than lost with this one. a.mu is held.
func (a *agent) sealLocked(now int64) { a.settleAs(now, fastSeal) }

// settleAs is settleLocked, whose counters take take (fastDrain or
// fastSeal). a.mu is held.
func (a *agent) settleAs(now int64, take fastTake) {
	until := a.fast.until.Swap(0)
	var byBucket [len(latencyBounds) + 1]uint64
	var lat int64
	t := a.tel
	t.seq.Add(1) // readers of the metrics retry while the counts move
	a.fast.collect(&t.live, &byBucket, &lat, take)
	var calls uint64
	for i, n := range byBucket {
		if n > 0 {
			t.buckets[i].Add(n)
			calls += n
		}
	}
	t.successes.Add(int64(calls))
	t.sum.Add(lat)
	t.seq.Add(1)
	if calls == 0 {
		return
	}
	if until == 0 || now < until {
		until = now
	}
	a.s.Tracker.addSuccesses(until-1, calls, lat)
	a.s.ownSuccesses()
	a.set(flagFellBack, false)
	a.dirty = true
	if a.fl != nil {
		a.fl.tally.successes(a.s.Gen, int64(calls), lat)
	}
}

// reopenLocked opens a's fast path again when no change is under
// verification, up to the end of the tracker's current buckets. a.mu is
// held and a is settled.
func (a *agent) reopenLocked() {
	if a.s.Verifying != nil || a.evicted {
		return
	}
	a.fast.until.Store(a.s.Tracker.bucketEnd())
}

// decidedLocked returns the batch of a decision just made on a's copy,
// for its caller to give to the save (nil without a fleet). a.mu is held.
func (a *agent) decidedLocked() *fleetBatch {
	fa := a.fl
	if fa == nil {
		return nil
	}
	if fa.decided == nil {
		fa.decided = new(fleetBatch)
	}
	return fa.decided
}

// unsetConfig takes back an operator's config ch (SetConfig) that could
// not be saved: the config before it, its events, and the agent's place
// on its ladder (route). A change it superseded stays superseded.
func (a *agent) unsetConfig(ch *Change, route *routeState) effects {
	a.dropQueued(func(ev *Event) bool { return ev.Change != nil && ev.Change.ID == ch.ID })
	if a.s.Config.Version == ch.To.Version {
		var eff effects
		a.s.install(ch.From.clone(), &eff)
		if n := len(a.s.History); n > 0 && a.s.History[n-1].Version == ch.From.Version {
			a.s.History = a.s.History[:n-1]
		}
		a.s.Route = route
	}
	return effects{publish: true, probe: true}
}

// unapplyOperator takes back an operator's change ch (Try, Rewind) that
// could not be saved: its config, its events, and the agent's place on
// its ladder (route, as it was before). A change a rewind superseded
// stays superseded.
func (a *agent) unapplyOperator(ch *Change, route *routeState) effects {
	a.dropQueued(func(ev *Event) bool { return ev.Change != nil && ev.Change.ID == ch.ID })
	if a.s.unapply(ch) {
		a.s.Route = route
	}
	return effects{publish: true, probe: true}
}
