package selfimprove

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// enterWrite admits one write to the store; it fails once Close has
// sealed the loop. Close waits for the writes admitted before it sealed,
// so that after Close returns nothing is written. No agent lock may be
// held when it is called.
func (l *Loop) enterWrite() bool {
	l.wmu.RLock()
	if l.sealed {
		l.wmu.RUnlock()
		return false
	}
	return true
}

// leaveWrite ends a write admitted by enterWrite.
func (l *Loop) leaveWrite() { l.wmu.RUnlock() }

// rollbackUnsaved reports a rollback that could not be saved. The rollback
// stands in memory. Its event stays queued, and so does this one, for the
// next save that succeeds; the notifier hears of the failure now.
func (l *Loop) rollbackUnsaved(a *agent, ch *Change, err error) {
	ev := newEvent(newID(l.clock.Now()), l.clock.Now(), EventRollbackFailed, ch)
	ev.Err = failure.Scrub(err.Error())
	a.mu.Lock()
	a.queue(queued{ev: ev, notified: true})
	a.mu.Unlock()
	l.notify(ev)
}

// remember records fix outcomes in the failure memory.
func (l *Loop) remember(fixes []fixNote) {
	for _, f := range fixes {
		l.mem.addFix(f.cluster, f.fix)
	}
}

// persist saves a's state, then appends the queued events to the log in
// decision order and hands them to the notifier. Saves of one agent are
// serialised, and each takes the state and the queue as they are when it
// begins, so a newer state is never overwritten by an older one and the
// log follows the order of decisions. Events that could not be logged go
// back to the head of the queue for the next save. After Close has sealed
// the loop it writes nothing and returns ErrClosed.
func (l *Loop) persist(a *agent) error { return l.persistWait(a, waits{}, nil) }

// persistWait is persist, whose wait on the fleet is part of the waits w
// (zero: a chain of its own; see waits), for the caller of a decision
// of batch b (effects.batch; nil: none), which fails if its decision was
// taken back before its turn (fleet_batch.go).
func (l *Loop) persistWait(a *agent, w waits, b *fleetBatch) error {
	if !l.enterWrite() {
		return ErrClosed
	}
	defer l.leaveWrite()
	return l.save(a, w, b)
}

// save is persistWait, for a caller that was admitted to write. The wait
// of a caller's chain w for another save of the agent (which holds the
// lock for one chain at most) is part of w's: a save that finds its time
// spent once it has the lock takes its decisions back (fleetLink.swap). A
// background save (zero w) starts its chain once it has the lock. The
// decision of batch b that the previous save took back with its own is
// not reported done: save returns why (fleet_batch.go).
func (l *Loop) save(a *agent, w waits, b *fleetBatch) error {
	a.saveMu.Lock() // its wait counts in w's time
	defer a.saveMu.Unlock()
	return l.saveHeld(a, w, b, nil)
}

// saveHeld is save, for a caller that holds a's save lock. claim, when
// set, is a probe's claim (fleetLink.claimProbe): it runs under a's lock before the
// state is taken, and the save goes on only if it reports true; the
// commit is then sent even unchanged (its compare-and-set is the claim).
func (l *Loop) saveHeld(a *agent, w waits, b *fleetBatch, claim func() bool) error {
	a.mu.Lock()
	if err := b.takenBack(); err != nil {
		a.mu.Unlock()
		return err // before the eviction's check: an evicted agent may have had it
	}
	if a.evicted {
		// Saved when it was evicted; its successor owns the state now.
		a.mu.Unlock()
		return nil
	}
	a.settleLocked(l.clock.Now().UnixNano())
	if claim != nil && !claim() {
		a.mu.Unlock()
		return nil
	}
	snap := a.s.snapshot()
	evs := a.takeQueued()
	taken := a.takeBatchLocked()
	a.dirty = false
	var c replica.Commit
	if a.fl != nil {
		c = a.fl.st.Begin() // at the revision snap was taken at
		if claim != nil {
			c.Claim()
		}
	}
	a.mu.Unlock()

	if a.fl != nil {
		var err error
		if c.Value, err = encodeShared(&snap); err == nil {
			err = l.fleet.commit(a, c, evs, w.c)
		}
		if err != nil {
			// The fleet did not take the decisions: their events go, and
			// their callers waiting for the save are told.
			a.mu.Lock()
			taken.fail(err)
			a.mu.Unlock()
			return err
		}
	}
	return l.stored(a, &snap, evs)
}

// stored writes the state snap of a and the events evs of the decisions
// it holds to the store, then hands the events to the notifier. When the
// store fails, a stays dirty and the events wait for the next save.
func (l *Loop) stored(a *agent, snap *agentState, evs []queued) error {
	err := l.saveState(a.id, snap)
	if err == nil && len(evs) > 0 {
		events := make([]Event, len(evs))
		for i, q := range evs {
			events[i] = *q.ev
		}
		if err = guard("AppendEvents", func() error { return l.store.AppendEvents(events) }); err != nil {
			l.log.Error("selfimprove: cannot record events", "agent", a.id, "count", len(evs), "error", err)
		}
	}
	if err != nil {
		l.m.storeErrors.Add(1)
		a.mu.Lock()
		a.dirty = true
		if q := eventQueue(append(evs[:len(evs):len(evs)], a.takeQueued()...)); len(q) > 0 {
			a.pending = &q
		}
		a.mu.Unlock()
		return err
	}
	for _, q := range evs {
		if !q.notified {
			l.notify(q.ev)
		}
	}
	return nil
}

// dropQueued removes the queued events of a that drop reports true for;
// they belong to a decision taken back.
func (a *agent) dropQueued(drop func(*Event) bool) {
	if a.pending == nil {
		return
	}
	if *a.pending = slices.DeleteFunc(*a.pending, func(q queued) bool { return drop(q.ev) }); len(*a.pending) == 0 {
		a.pending = nil
	}
}

// saveState encodes and saves the state of agent id.
func (l *Loop) saveState(id string, st *agentState) error {
	data, err := encodeWithLadder(st, l.routes.of(id))
	if err == nil {
		err = guard("SaveAgent", func() error { return l.store.SaveAgent(id, data) })
	}
	if err != nil {
		l.log.Error("selfimprove: cannot save agent state", "agent", id, "error", err)
	}
	return err
}

// flush saves the agents whose state changed since their last save, and
// the failure memory.
func (l *Loop) flush() error {
	if !l.enterWrite() {
		return ErrClosed
	}
	defer l.leaveWrite()
	return l.flushAdmitted()
}

// flushAdmitted is flush, for a caller that was admitted to write (or
// that sealed the loop).
func (l *Loop) flushAdmitted() error {
	var errs []error
	l.agents.Range(func(_, v any) bool {
		a := v.(*agent)
		a.mu.Lock()
		if !a.evicted {
			a.settleLocked(l.clock.Now().UnixNano())
		}
		dirty := a.dirty
		a.mu.Unlock()
		if dirty {
			if err := l.save(a, waits{}, nil); err != nil {
				errs = append(errs, err)
			}
		}
		return true
	})
	errs = append(errs, l.saveMemory(l.isClosed.Load()))
	return errors.Join(errs...)
}

// notify hands ev to the subscribers (events.go) and to the notifier, if
// there is one.
func (l *Loop) notify(ev *Event) {
	l.hub.publish(ev)
	if l.disp != nil {
		l.disp.send(*ev)
	}
}

// saveMemory saves the memory through the store, if it changed, at most
// once every memorySaveEvery unless the loop is closing.
func (l *Loop) saveMemory(closing bool) error {
	ms, ok := l.store.(metaStore)
	if !ok {
		return nil
	}
	if !l.memLoaded.Load() {
		if err := l.loadMemory(); err != nil {
			l.m.storeErrors.Add(1)
			l.log.Error("selfimprove: cannot read the failure memory; not saving it", "error", err)
			return fmt.Errorf("selfimprove: read memory: %w", err)
		}
	}
	data, changed, err := l.mem.encode(l.clock.Now().UnixNano(), closing)
	if err == nil && changed {
		err = guard("SaveMeta", func() error { return ms.SaveMeta(memoryDoc, data) })
	}
	if err != nil {
		l.m.storeErrors.Add(1)
		l.mem.mu.Lock()
		l.mem.dirty = true
		l.mem.mu.Unlock()
		l.log.Error("selfimprove: cannot save the failure memory", "error", err)
		return fmt.Errorf("selfimprove: save memory: %w", err)
	}
	return nil
}

// loadMemory reads the saved memory, if any, into the memory (clusters
// already in it are kept as they are). A corrupt document is logged and
// replaced at the next save.
func (l *Loop) loadMemory() error {
	ms, ok := l.store.(metaStore)
	if !ok {
		l.memLoaded.Store(true)
		return nil
	}
	err := guard("LoadMeta", func() error { return ms.LoadMeta(memoryDoc, l.mem.load) })
	switch {
	case err == nil, failure.Is(err, fs.ErrNotExist):
	case failure.Is(err, ErrCorruptState):
		l.m.storeErrors.Add(1)
		if _, ro := l.store.(*ReadOnlyStore); ro {
			l.log.Error("selfimprove: the failure memory cannot be read: read as empty and left as it is (read-only; the Loop that owns the directory sets it aside)", "error", err)
		} else {
			l.log.Error("selfimprove: the failure memory was corrupt; starting afresh", "error", err)
		}
	default:
		return err
	}
	l.memLoaded.Store(true)
	return nil
}

// addAgent makes sure agentID is in the saved list of agents with
// proposals.
func (l *Loop) addProposalAgent(agentID string) error {
	ms, ok := l.store.(metaStore)
	x := &l.props
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.agents == nil {
		x.agents = map[string]struct{}{}
	}
	if _, ok := x.agents[agentID]; ok {
		return nil
	}
	x.agents[agentID] = struct{}{}
	if !ok {
		return nil
	}
	ids := make([]string, 0, len(x.agents))
	for id := range x.agents {
		ids = append(ids, base64.StdEncoding.EncodeToString([]byte(id)))
	}
	slices.Sort(ids)
	data, err := json.Marshal(struct {
		Format int      `json:"format"`
		Agents []string `json:"agents_b64"`
	}{1, ids})
	if err == nil {
		err = guard("SaveMeta", func() error { return ms.SaveMeta(proposalsDoc, data) })
	}
	if err != nil {
		delete(x.agents, agentID)
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot save the list of agents with proposals", "error", err)
	}
	return err
}

// loadProposalAgents loads the agents with proposals (proposalAgents)
// that are not in memory.
func (l *Loop) loadProposalAgents() {
	for _, id := range l.proposalAgents() {
		l.agent(id) // indexes its proposals as it loads
	}
}

// proposalAgents returns the agents with proposals: the saved list, read
// once, and those that filed one since; none after Close.
func (l *Loop) proposalAgents() []string {
	x := &l.props
	x.mu.Lock()
	if !x.loaded {
		x.loaded = true
		if x.agents == nil {
			x.agents = map[string]struct{}{}
		}
		if ms, ok := l.store.(metaStore); ok {
			err := guard("LoadMeta", func() error { return ms.LoadMeta(proposalsDoc, x.decode) })
			if err != nil && !failure.Is(err, fs.ErrNotExist) {
				l.m.storeErrors.Add(1)
				l.log.Error("selfimprove: cannot read the list of agents with proposals", "error", err)
			}
		}
	}
	ids := make([]string, 0, len(x.agents))
	for id := range x.agents {
		ids = append(ids, id)
	}
	x.mu.Unlock()
	if l.isClosed.Load() {
		return nil // the store is closed: list the agents in memory
	}
	return ids
}

// fleetCallKey is the secret of the call IDs of a loop with a fleet.
var fleetCallKey = []byte("selfimprove call IDs, shared by a fleet")

// loadCallKeys returns the secret of st (see callKeys): read, or made and
// saved, when st keeps documents and fleet is false; given, the one of
// WithCallIDSecret. When it can neither read nor save one, it returns a
// random one with the error.
func loadCallKeys(st Store, fleet bool, given []byte) (callKeys, error) {
	switch {
	case given != nil:
		return callKeys{given}, nil
	case fleet:
		return callKeys{fleetCallKey}, nil
	}
	secret := make([]byte, 32)
	crand.Read(secret)
	ms, ok := st.(metaStore)
	if !ok {
		return callKeys{secret}, nil
	}
	var doc struct {
		Key []byte `json:"key"`
	}
	err := guard("LoadMeta", func() error {
		return ms.LoadMeta(callKeyDoc, func(b []byte) error {
			if err := json.Unmarshal(b, &doc); err != nil {
				return err
			}
			if len(doc.Key) != 32 {
				return fmt.Errorf("a key of %d bytes, not 32", len(doc.Key))
			}
			return nil
		})
	})
	switch {
	case err == nil:
		return callKeys{doc.Key}, nil
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorruptState):
		return callKeys{secret}, fmt.Errorf("selfimprove: read the key of call IDs: %w", err)
	}
	if _, ro := st.(*ReadOnlyStore); ro {
		return callKeys{secret}, nil // a reader hands out no call ID to keep
	}
	b, _ := json.Marshal(struct {
		Key []byte `json:"key"`
	}{secret})
	if err := guard("SaveMeta", func() error { return ms.SaveMeta(callKeyDoc, b) }); err != nil {
		return callKeys{secret}, fmt.Errorf("selfimprove: save the key of call IDs: %w", err)
	}
	return callKeys{secret}, nil
}

// callKeyDoc names the document of the call IDs' secret.
const callKeyDoc = "call-id-key"
