package selfimprove

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"iter"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/self-improving-loop/selfimprove/internal/replica"

	"github.com/self-improving-loop/selfimprove/failure"
)

// frontSlots is the size of each of the Loop's front caches of agents.
const frontSlots = 256

// atEntry is a slot of the front cache by address: the address of an ID's
// bytes, and the agent. The two are stored one after the other, so a
// reader may see one's key with another's agent, which the agent's own ID
// then refuses.
type atEntry struct {
	key atomic.Uintptr
	a   atomic.Pointer[agent]
}

// sameString reports whether a and b are the same bytes in memory. With
// a an agent's ID, which keeps its bytes from being reused, that means
// they are equal, without comparing them.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// addrOf is the address of s's bytes, never dereferenced.
func addrOf(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }

// atSlot is the slot of an ID whose bytes are at addr in the front cache
// by address: a hash of addr.
func atSlot(addr uintptr) int { return int(uint64(addr) * 0x9e3779b97f4a7c15 >> 56) }

// agent returns the live agent for id, loading it from the store on first
// use. On a read error it returns nil and the error; on a corrupt state
// file it returns a fresh agent and the error. When the new agent takes
// the live agents over the cap, its load evicts idle ones first, so that
// eviction keeps up with creation whatever the rate of new IDs.
func (l *Loop) agent(id string) (*agent, error) { return l.agentIn(id, nil) }

// agentIn is agent for a call whose waits on the replication are *fw
// (see waits; fw nil: a load of its own, not a call's): loading the agent
// from the fleet is part of them, and starts their clock. A call (fw set)
// waits for a load at most storeWait (see create).
func (l *Loop) agentIn(id string, fw *waits) (*agent, error) {
	// The front caches: the agents called last, first by the address of
	// the ID's bytes (a caller usually passes the same string each time: a
	// constant, a field), then by hash of the ID, so that a call of a busy
	// agent costs a comparison, or a hash and a comparison. A hit is always
	// checked against the ID itself.
	key := addrOf(id)
	at := &l.frontAt[atSlot(key)]
	if at.key.Load() == key { // else a miss, without touching the agent
		if a := at.a.Load(); a != nil && sameString(a.id, id) && !a.has(flagGone) {
			return a, nil
		}
	}
	slot := &l.front[maphash.String(l.seed, id)%frontSlots]
	if a := slot.Load(); a != nil && a.id == id && !a.has(flagGone) {
		// An agent enters the cache by address from the one by hash, and
		// only for the very string it was created with, so that the
		// agents of many or freshly built IDs stay out of it.
		if sameString(a.id, id) {
			at.a.Store(a)
			at.key.Store(key)
		}
		return a, nil
	}
	if v, ok := l.agents.Load(id); ok {
		a := v.(*agent)
		slot.Store(a)
		return a, nil
	}
	a, err := l.create(id, fw)
	if fw != nil {
		fw.pause() // fn runs now: its time is its own (resumed in finish)
	}
	if a != nil {
		slot.Store(a)
	}
	return a, err
}

// storeWait is how long a call, which decides nothing by being an
// agent's first, waits for the store: for its agent's load, and the
// evictions the new agent brings on (WithMaxAgents), together. Past it,
// fn runs untracked under the default config (ErrStoreSlow) while the
// load goes on in the background; the calls after it find the agent.
const storeWait = time.Second

// maxLoading bounds the loads in flight (create), so that a hung store
// and a stream of new IDs do not pile up goroutines: past it, a call of
// an agent not in memory runs untracked at once (ErrStoreSlow).
const maxLoading = 1024

// loading is a load of an agent in flight: one per ID (Loop.loading),
// which every call of the ID meanwhile waits for. a and err are its
// result, set before done closes.
type loading struct {
	done chan struct{}
	a    *agent
	err  error
}

// create has agent id loaded or created, on a goroutine of its own, once
// however many calls want it meanwhile, and waits for it: a call (fw set)
// at most storeWait, then it has the agent if the load created it, or
// else an error wrapping ErrStoreSlow; any other caller until it is done.
// With a fleet and fw, the load's wait on the fleet is of the chain *fw.
func (l *Loop) create(id string, fw *waits) (*agent, error) {
	var w *replica.Chain
	if l.fleet != nil && fw != nil {
		fw.c = l.fleet.Chain(fw.c) // the wait for the load counts in its time
		w = fw.c
	}
	ld := &loading{done: make(chan struct{})}
	if v, busy := l.loading.LoadOrStore(id, ld); busy {
		ld = v.(*loading)
	} else {
		l.startLoad(id, ld, w)
	}
	if fw != nil {
		t := time.NewTimer(storeWait)
		defer t.Stop()
		select {
		case <-ld.done:
		case <-t.C:
			if v, ok := l.agents.Load(id); ok { // loaded; an eviction is slow
				return v.(*agent), nil
			}
			return nil, l.storeSlow(id, fmt.Errorf("%w: agent %.64q not loaded within %v; fn ran untracked", ErrStoreSlow, id, storeWait))
		}
	}
	<-ld.done
	if errors.Is(ld.err, ErrStoreSlow) {
		return ld.a, l.storeSlow(id, ld.err)
	}
	return ld.a, ld.err
}

// storeSlow counts err, a call's wait for the store given up
// (ErrStoreSlow), in Metrics.StoreErrors, logs it as the calls that run
// untracked are (at most a line a minute for the agent), and returns it.
func (l *Loop) storeSlow(id string, err error) error {
	l.m.storeErrors.Add(1)
	l.mistakes.log(l.log, l.seed, id, err, l.clock.Now())
	return err
}

// startLoad runs the load ld of agent id (load), then the evictions it
// brings on, in the background, and closes ld.done; after Close, or with
// maxLoading loads in flight, it fails ld at once.
func (l *Loop) startLoad(id string, ld *loading, w *replica.Chain) {
	end := func() {
		l.loading.CompareAndDelete(id, ld) // after the agent is in l.agents
		close(ld.done)
	}
	l.bgMu.Lock()
	if l.closed || l.loadingN.Load() >= maxLoading {
		if ld.err = ErrClosed; !l.closed {
			ld.err = fmt.Errorf("%w: %d agents loading", ErrStoreSlow, maxLoading)
		}
		l.bgMu.Unlock()
		end()
		return
	}
	l.bg.Add(1) // Close waits for it, as for an analysis
	l.loadingN.Add(1)
	l.bgMu.Unlock()
	go func() {
		defer l.bg.Done()
		defer l.loadingN.Add(-1)
		defer end()
		a, created, err := l.load(id, w)
		ld.a, ld.err = a, err
		if created && !l.isClosed.Load() { // Close saves what is in memory
			l.evictOver(a) // not a itself: its call would load it again, and again
		}
	}()
}

// load loads or creates agent id, unless another load did meanwhile;
// created reports that this one did. w is the chain of its wait on the
// fleet (nil: its own). Once Close has begun, a load still queued for
// its turn fails with ErrClosed without reading the store: Close waits
// for the reads under way, not for those behind them.
func (l *Loop) load(id string, w *replica.Chain) (_ *agent, created bool, _ error) {
	mu := &l.createMu[maphash.String(l.seed, id)%uint64(len(l.createMu))]
	mu.Lock()
	defer mu.Unlock()
	if v, ok := l.agents.Load(id); ok {
		return v.(*agent), false, nil
	}
	if l.isClosed.Load() {
		return nil, false, ErrClosed
	}
	a := &agent{id: id, tel: new(telemetry)}
	st, found, err := l.loadState(id)
	if a.s = st; err != nil && !failure.Is(err, ErrCorruptState) {
		return nil, false, err
	}
	if found {
		for _, c := range a.s.Clusters {
			l.shared.observe(id, c.ID, []byte(c.Sig), c.Class, c.Last, a.s.Tracker.Win.Width*windowSlots)
		}
		l.props.note(id, a.s.Proposals)
	}
	if l.fleet != nil {
		l.fleet.attach(a, w)
	}
	a.used.Store(true)
	a.mirrorLocked()
	a.cfg.Store(&installed{key: l.keys.of(id)}) // the key every install keeps
	a.publishLocked(l.canaryCut > 0)
	l.agents.Store(id, a)
	l.ring.add(a)
	l.m.agents.Add(1)
	return a, true, err
}

// loadState reads agent id's state from the store: the saved one (found),
// or a new one when there is none or it was corrupt (with the error). On
// another read error it returns the error alone.
func (l *Loop) loadState(id string) (st agentState, found bool, err error) {
	err = guard("LoadAgent", func() error {
		return l.store.LoadAgent(id, func(data []byte) error {
			s, err := decodeState(data, id)
			if err == nil {
				st = s
			}
			return err
		})
	})
	switch {
	case err == nil:
		l.m.loads.Add(1)
		return st, true, nil
	case failure.Is(err, fs.ErrNotExist):
		return newState(id, l.defaultConfig.clone()), false, nil
	case failure.Is(err, ErrCorruptState):
		l.m.storeErrors.Add(1)
		if _, ro := l.store.(*ReadOnlyStore); ro { // it starts nothing
			l.log.Error("selfimprove: an agent's state file cannot be read: left as it is (read-only; the Loop that owns the directory sets it aside)", "agent", id, "error", err)
		} else {
			l.log.Error("selfimprove: agent state was corrupt; starting afresh", "agent", id, "error", err)
		}
		return newState(id, l.defaultConfig.clone()), false, err
	default:
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot load agent state", "agent", id, "error", err)
		return agentState{}, false, err
	}
}

// lockAgent returns id's live agent, locked and settled (see
// agent.settleLocked; now is the time to settle at, 0 for the clock's),
// loading it if needed. An agent evicted between the lookup and the lock
// is looked up again.
func (l *Loop) lockAgent(a *agent, id string, now int64) (*agent, error) {
	for {
		if a == nil {
			var err error
			if a, err = l.agent(id); a == nil {
				return nil, err
			}
		}
		a.mu.Lock()
		if !a.evicted {
			if now == 0 {
				now = l.clock.Now().UnixNano()
			}
			a.settleLocked(now)
			return a, nil
		}
		a.mu.Unlock()
		waitEvicted(a)
		a = nil
	}
}

// waitEvicted waits, blocked, for the eviction of a to end: evict holds
// a's save lock from marking it evicted until its save has landed and it
// left l.agents, or failed and a is live again. Only then may the agent
// be looked up again (a lookup before would find a again, and spin).
func waitEvicted(a *agent) {
	a.saveMu.Lock()
	//lint:ignore SA2001 the wait is the point: nothing is done under the lock
	a.saveMu.Unlock()
}

// view calls f with agent id's state, without creating or keeping the
// agent: the live one, locked, or else a copy read from the store (not
// after Close), with the fleet's shared state of it when there is one
// (fleetLink.view). It reports whether the agent is known.
func (l *Loop) view(id string, f func(s *agentState)) bool { return l.viewOf(id, false, f) }

// viewStats is view for a getter that reports calls: an agent not
// loaded here has the fleet's call statistics, when the fleet has them.
func (l *Loop) viewStats(id string, f func(s *agentState)) bool { return l.viewOf(id, true, f) }

// viewOf is view, with the fleet's call statistics when stats is set.
func (l *Loop) viewOf(id string, stats bool, f func(s *agentState)) bool {
	if checkAgentID(id) != nil {
		return false
	}
	for {
		v, ok := l.agents.Load(id)
		if !ok {
			break
		}
		a := v.(*agent)
		a.mu.Lock()
		if !a.evicted {
			a.settleLocked(l.clock.Now().UnixNano())
			f(&a.s)
			a.mu.Unlock()
			return true
		}
		a.mu.Unlock()
		waitEvicted(a)
	}
	if l.isClosed.Load() {
		return false
	}
	st, found, _ := l.loadState(id)
	if l.fleet != nil && l.fleet.view(id, &st, stats) {
		found = true
	}
	if !found {
		return false
	}
	f(&st)
	return true
}

// unknown reports whether agentID is a valid ID the loop does not know:
// not in memory, not in the store (which answers that it has no such
// file: a damaged file or the store's error is not "unknown", and the
// method meets and reports it) and not in the fleet. It creates, logs
// and decodes nothing; after Close it reports false, for the method to
// return ErrClosed.
func (l *Loop) unknown(agentID string) bool {
	if l.isClosed.Load() || checkAgentID(agentID) != nil {
		return false
	}
	if _, ok := l.agents.Load(agentID); ok {
		return false
	}
	err := guard("LoadAgent", func() error { return l.store.LoadAgent(agentID, func([]byte) error { return nil }) })
	if !failure.Is(err, fs.ErrNotExist) {
		return false
	}
	if l.fleet != nil {
		st := newState(agentID, l.defaultConfig.clone())
		return !l.fleet.view(agentID, &st, false)
	}
	return true
}

// eachAgent calls f for each live agent in memory, with its lock held.
func (l *Loop) eachAgent(f func(a *agent)) {
	l.agents.Range(func(_, v any) bool {
		a := v.(*agent)
		a.mu.Lock()
		if !a.evicted {
			a.settleLocked(l.clock.Now().UnixNano())
			f(a)
		}
		a.mu.Unlock()
		return true
	})
}

// agentLister is implemented by a Store that can list the agents it keeps
// state for. FileStore and RAMStore implement it.
type agentLister interface {
	// ListAgents calls yield with each agent ID, in no particular order,
	// until yield returns false.
	ListAgents(yield func(agentID string) bool) error
}

// Agents returns the IDs of the agents the loop knows, each once and in no
// particular order: those in memory, then those only in the store (when
// it implements agentLister; not after Close). It creates no agent; a
// store that cannot be listed is logged and counted in
// Metrics.StoreErrors.
func (l *Loop) Agents() iter.Seq[string] {
	return func(yield func(string) bool) {
		seen := map[string]struct{}{}
		stop := false
		l.agents.Range(func(k, _ any) bool {
			id := k.(string)
			seen[id] = struct{}{}
			stop = !yield(id)
			return !stop
		})
		lister, ok := l.store.(agentLister)
		if stop || !ok || l.isClosed.Load() {
			return
		}
		err := lister.ListAgents(func(id string) bool {
			if _, dup := seen[id]; dup || checkAgentID(id) != nil {
				return true // a store may hold one the loop now refuses
			}
			if _, live := l.agents.Load(id); live {
				return true
			}
			seen[id] = struct{}{}
			return yield(id)
		})
		if err != nil {
			l.m.storeErrors.Add(1)
			l.log.Error("selfimprove: cannot list the agents in the store", "error", err)
		}
	}
}

// evictRing is the live agents in the order the eviction hand visits them:
// an approximate LRU (CLOCK, second chance). An agent used since the hand
// last passed it is spared once; an idle one is evicted. Adding, removing
// and each step of the hand are O(1).
type evictRing struct {
	mu     sync.Mutex
	agents []*agent
	hand   int
}

func (r *evictRing) add(a *agent) {
	r.mu.Lock()
	a.slot = int32(len(r.agents))
	r.agents = append(r.agents, a)
	r.mu.Unlock()
}

// removeLocked takes a out of the ring; r.mu is held.
func (r *evictRing) removeLocked(a *agent) {
	i, n := int(a.slot), len(r.agents)-1
	if i < 0 || i > n || r.agents[i] != a {
		return
	}
	r.agents[i] = r.agents[n]
	r.agents[i].slot = int32(i)
	r.agents[n] = nil
	r.agents = r.agents[:n]
	a.slot = -1
	if r.hand >= n {
		r.hand = 0
	}
}

// victim moves the hand to an idle agent and takes it out of the ring: not
// used since the hand last passed, with no strategy running, no event
// waiting for the log and, with a fleet, no count the fleet has not booked
// (unless force: see unsentLocked). It gives up after two turns (every
// agent busy). It never takes keep.
func (r *evictRing) victim(force bool, keep *agent) *agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	for steps := 2*len(r.agents) + 1; steps > 0 && len(r.agents) > 0; steps-- {
		a := r.agents[r.hand]
		r.hand = (r.hand + 1) % len(r.agents)
		if a == keep {
			continue
		}
		recent := a.used.Swap(false)
		a.mu.Lock()
		busy := a.busyLocked(force)
		a.mu.Unlock()
		if !recent && !busy {
			r.removeLocked(a)
			return a
		}
	}
	return nil
}

// busyLocked reports whether a stays in memory when the cap would evict
// it: evicted already, analysing, with events not yet logged or, with a
// fleet, with counts the fleet has not booked (fleetAgent.unsentLocked;
// force: only a delta in flight). a.mu is held.
func (a *agent) busyLocked(force bool) bool {
	return a.evicted || a.s.analyzing || a.pending != nil || a.fl != nil && a.fl.unsentLocked(force)
}

// evictSlack is how many agents beyond the cap (WithMaxAgents) a replica
// of a fleet keeps in memory because their counts have not gone to the
// fleet yet: a quarter of the cap, plus one. Beyond it, and while the
// fleet cannot be reached, such an agent is evicted anyway, its counts
// kept for its next load (fleetMark).
func (l *Loop) evictSlack() int64 { return int64(l.maxAgents/4 + 1) }

// evictOver evicts idle agents but keep (nil: any) while more than the
// cap are in memory.
func (l *Loop) evictOver(keep *agent) {
	for l.m.agents.Load() > int64(l.maxAgents) && l.evictOne(keep) {
	}
}

// evictOne saves and evicts one idle agent other than keep (nil: any),
// and reports whether it did.
func (l *Loop) evictOne(keep *agent) bool {
	force := l.fleet != nil && (l.fleet.Down() || l.m.agents.Load() > int64(l.maxAgents)+l.evictSlack())
	for range 4 {
		a := l.ring.victim(force, keep)
		if a == nil {
			return false
		}
		if l.evict(a, force) {
			return true
		}
		l.ring.add(a) // busy after all, or not saved: it stays
	}
	return false
}

// evict saves a and removes it from memory, unless it is busy (busyLocked,
// with force) or cannot be saved. A call that still holds a finds it
// evicted and moves to a fresh agent loaded from the store.
func (l *Loop) evict(a *agent, force bool) bool {
	if !l.enterWrite() {
		return false
	}
	defer l.leaveWrite()
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	if a.busyLocked(force) {
		a.mu.Unlock()
		return false
	}
	a.sealLocked(l.clock.Now().UnixNano()) // a call booking late takes the locked path
	snap := a.s.snapshot()
	var mark fleetMark
	park := false
	if a.fl != nil {
		mark, park = a.fl.markLocked()
	}
	a.evicted = true
	a.set(flagGone, true)
	a.mu.Unlock()
	if err := l.saveState(a.id, &snap); err != nil {
		l.m.storeErrors.Add(1)
		a.mu.Lock()
		a.evicted = false
		a.set(flagGone, false)
		a.fast.unseal(&a.tel.live)
		a.reopenLocked()
		a.mu.Unlock()
		return false
	}
	if park {
		l.fleet.park(a.id, mark) // before the agent goes: its next load takes it
	}
	l.agents.CompareAndDelete(a.id, a)
	l.m.agents.Add(-1)
	l.m.evictions.Add(1)
	return true
}

// flushLoop saves the agents that ran, every interval, and evicts the idle
// agents that were busy when they would have been evicted, until Close.
func (l *Loop) flushLoop(interval time.Duration) {
	defer close(l.flushDone)
	if interval <= 0 {
		<-l.stopFlush // periodic saves are off
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush()
			l.evictOver(nil) // agents kept over the cap because they were busy
		case <-l.stopFlush:
			return
		}
	}
}
