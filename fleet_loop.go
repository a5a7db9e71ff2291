package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The Loop's side of a Fleet (WithFleet): attaching an agent to the
// fleet's state, counting calls and sending them in batches, taking the
// pooled counts back, committing decisions, and taking other replicas'
// decisions. The call path only counts (count, under the agent's
// lock, O(1)); everything that talks to the fleet runs in the flusher's
// goroutine, or when a decision is saved, each bounded by the fleet
// timeout. No agent lock is held while the fleet is called.
//
// Every operation on the fleet is made, and its answer taken, by the
// transport, replica.Client (internal/replica), which knows nothing of
// the Loop but its hooks. This file has the link (the hooks), the Loop's
// hooks into the replication that the core calls (leaseAnalysis,
// replicaMetrics; fleet_notes.go has postDead and postCause), and the
// counts a flush sends; fleet_commit.go has the shared state: attaching an agent,
// adopting the fleet's state, committing decisions and the lease on a
// strategy run.

// leaseAnalysis has this replica run the strategy for a's analysis an
// alone: with a fleet, it takes the agent's lease (lease), its waits
// starting w's clock if none has. It reports false when another replica
// runs it, or the fleet cannot be reached; true without a fleet.
func (l *Loop) leaseAnalysis(a *agent, an *Analysis, w *waits) bool {
	if a.fl == nil {
		return true
	}
	w.c = l.fleet.Chain(w.c)
	return l.fleet.lease(a, an, w.c)
}

// releaseAnalysis ends what leaseAnalysis took: with a fleet, it gives
// the agent's lease back (release).
func (l *Loop) releaseAnalysis(a *agent, w waits) {
	if a.fl != nil {
		l.fleet.release(a, w.c)
	}
}

// replicaMetrics fills out's fleet fields (Metrics.FleetErrors and the
// rest), with a fleet; without one it leaves them zero.
func (l *Loop) replicaMetrics(out *Metrics) {
	if l.fleet == nil {
		return
	}
	c := &l.fleet.Counts
	out.FleetErrors, out.FleetConflicts, out.FleetOutages = c.Errors.Load(), c.Conflicts.Load(), c.Outages.Load()
	out.FleetCommits, out.FleetCommitNS, out.FleetCommitMaxNS = c.Commits.Load(), c.CommitNS.Load(), c.CommitMaxNS.Load()
	out.FleetLeases, out.FleetLeasesBusy, out.FleetLeaseErrors = c.Leases.Load(), c.LeasesBusy.Load(), c.LeaseErrors.Load()
	out.FleetLag, out.FleetBehind = c.Lag.Load(), c.Behind.Load()
	out.FleetReplica = l.fleet.Name
	out.FleetReplicas = l.fleet.ReplicasSeen(l.clock.Now())
	if l.fleet.Down() {
		out.FleetDown = 1
	}
}

// fleetClient is the transport of a Loop's fleet (replica.Client): the
// fleet time and the outage under way, the flusher's goroutine, the
// fleet's operations with their answers as values, the outboxes of
// events and notes, and the replicas seen.
type fleetClient = replica.Client[FleetDelta, FleetPool, Event, DeadRoute]

// fleetLink is a Loop's connection to its fleet: the transport, and what
// the Loop keeps of it (the counts to send, the leases to give back). It
// is the transport's Hooks.
type fleetLink struct {
	*fleetClient
	calls int64
	// batches numbers the replica's deltas, of every agent (see
	// FleetDelta.Batch).
	batches atomic.Uint64
	polled  time.Time             // the last flush that asked for every agent; guarded by FlushMu
	rel     replica.Queue[*agent] // leases for the flusher to give back (releaseLater), at most maxFleetReleases
	// badStats is when the invalid statistics of agents not loaded here
	// were last reported (Unix ns), by agent ID, at most maxBadStats.
	badMu    sync.Mutex
	badStats map[string]int64
	// parked is the fleet bookkeeping of agents evicted, by ID, until
	// they are loaded again, at most WithMaxAgents's (fleet_pool.go).
	parkMu sync.Mutex
	parked map[string]fleetMark

	// l is the Loop the link serves: the driver (step), the agents and
	// their files, the metrics and the log.
	l *Loop
}

// fleetPoll is how often a flush asks the fleet for the revision of every
// live agent, with or without counts to send: a notification lost (a
// subscriber reconnecting to Redis) is made up within it.
const fleetPoll = time.Second

// maxFleetEvents bounds the events waiting for the flusher to go to the
// fleet's log; beyond it the oldest are dropped (they are in the store).
const maxFleetEvents = 4096

func newFleetLink(l *Loop, o *options) *fleetLink {
	fl := &fleetLink{calls: int64(o.fleetCalls), rel: replica.Queue[*agent]{Max: maxFleetReleases}, l: l}
	fl.fleetClient = replica.NewClient(replica.Config[FleetDelta, FleetPool, Event, DeadRoute]{
		Fleet: o.fleet, Name: newID(time.Now()), Timeout: o.fleetTimeout, Interval: o.fleetInterval,
		Hooks: fl, Log: o.logger, NoteOf: func(d DeadRoute) (string, time.Time) { return d.Route, d.Until },
		MaxEvents: maxFleetEvents, MaxNotes: maxOutbox,
	})
	return fl
}

// start subscribes to the fleet's notifications and starts the
// flusher.
func (fl *fleetLink) start() { fl.Start(fl.notified) }

// close stops the flusher, sends the counts not sent yet of the agents
// in memory (those kept of agents evicted are logged as lost), and
// unsubscribes. Close calls it before it seals the loop.
func (fl *fleetLink) close() error {
	err := fl.Close()
	fl.unparkAll()
	return err
}

// Now reads the Loop's clock (replica.Hooks).
func (fl *fleetLink) Now() time.Time { return fl.l.clock.Now() }

// Flush is the flusher's flush (replica.Hooks).
func (fl *fleetLink) Flush() error { return fl.flush() }

// Back has every live agent compared with the fleet's state at the next
// flush, once the fleet answers after it was down (replica.Hooks).
func (fl *fleetLink) Back() { fl.resyncAll() }

// Outage records and hands on the event of an outage that began (err
// its first failure) or ended after d (replica.Hooks).
func (fl *fleetLink) Outage(now time.Time, err error, d time.Duration) {
	if err != nil {
		fl.event(&Event{ID: newID(now), Time: now.UTC(), Type: EventFleetUnreachable,
			Message: fmt.Sprintf("fleet unreachable: %s; calls keep their configs, no change is applied until it is back", failure.Scrub(err.Error()))})
		return
	}
	fl.event(&Event{ID: newID(now), Time: now.UTC(), Type: EventFleetRecovered,
		Message: fmt.Sprintf("fleet reachable again after %v: configs resynchronised, counts sent", d)})
}

// onErr takes an error of the fleet about agent a (nil: of no agent):
// the fleet answers slowly, could not be reached, or it refused or held
// invalid data (replica.Client.Failed).
func (fl *fleetLink) onErr(a *agent, err error) {
	id, at := fleetWho(a)
	fl.Failed(err, id, at)
}

// bad reports an answer of the fleet that is no outage: invalid data of
// agent a (nil: of no agent), or a refusal (replica.Client.Bad).
func (fl *fleetLink) bad(a *agent, err error) {
	id, at := fleetWho(a)
	fl.Bad(err, id, at)
}

// event writes ev, an event of the fleet's link, to the store (it
// concerns no agent, and no decision waits for it) and hands it on.
func (fl *fleetLink) event(ev *Event) {
	l := fl.l
	if l.enterWrite() {
		if err := guard("AppendEvents", func() error { return l.store.AppendEvents([]Event{*ev}) }); err != nil {
			l.m.storeErrors.Add(1)
			l.log.Error("selfimprove: cannot record event", "type", ev.Type, "error", err)
		}
		l.leaveWrite()
	}
	l.notify(ev)
}

// fleetItem is one agent's delta in a flush.
type fleetItem struct {
	a *agent
	d FleetDelta
	// again: d is a delta whose answer was lost, sent again as it was.
	again bool
	// prior: d holds calls of earlier generations (fleetTally.prior);
	// the agent's current counts go in a second delta (sendRest).
	prior bool
}

// flush sends the counts of the calls not sent yet, one delta per
// agent with calls, a change under verification or a resync due, and
// takes back the pooled counts: other replicas' calls are booked, the
// change under verification is judged on the fleet's calls, and a newer
// state is taken.
func (fl *fleetLink) flush() error {
	fl.FlushMu.Lock()
	defer fl.FlushMu.Unlock()
	return fl.flushLocked()
}

// flushLocked is flush, with FlushMu held.
func (fl *fleetLink) flushLocked() error {
	l := fl.l
	now := l.clock.Now()
	poll := now.Sub(fl.polled) >= fleetPoll || now.Before(fl.polled)
	if poll {
		fl.polled = now
	}
	fl.pollNotes(now, poll)
	fl.Seen(now)
	items := fl.items(poll)
	fl.stats(items)
	lag, err := fl.send(items, nil, nil)
	if err == nil {
		var more int64
		more, err = fl.sendRest(items, nil, nil)
		lag = max(lag, more)
	}
	if err == nil && len(items) > 0 {
		fl.Counts.Lag.Store(lag)
	}
	fl.SendEvents()
	fl.releases()
	fl.rewrite()
	l.evictOver(nil) // agents kept over the cap until their counts went
	return err
}

// send sends the deltas of items in one Add and takes back the pooled
// counts (pooled; rep, when set, gets a decision they make). It
// returns the most revisions an agent's copy was behind. FlushMu is held.
// Its waits on the fleet, and those of the decisions the counts make, are
// of the chain w (nil: the Add and each decision a chain of its own).
func (fl *fleetLink) send(items []fleetItem, rep *Report, w *replica.Chain) (lag int64, _ error) {
	if len(items) == 0 {
		return 0, nil
	}
	deltas := make([]FleetDelta, len(items))
	for i := range items {
		deltas[i] = items[i].d
	}
	pools, again, err := fl.Add(w, deltas)
	if err != nil {
		// Unreachable: the deltas are sent again as they are. Refused
		// (no outage): they would be refused again, and are dropped.
		in := new(fleetInput)
		for _, it := range items {
			fl.book(it.a, in, fleetInput{kind: fleetAnswered, item: it, again: again, why: err})
		}
		return 0, err
	}
	in := new(fleetInput) // one input for the agents' bookkeeping, in turn
	for i := range items {
		a := items[i].a
		fl.book(a, in, fleetInput{kind: fleetAnswered, item: items[i]})
		if pools[i].Err != nil {
			fl.bad(a, pools[i].Err)
		}
		if n := fl.pooled(a, &items[i], &pools[i], rep, w, in); n > 0 {
			fl.Counts.Behind.Add(1)
			lag = max(lag, n)
		}
	}
	return lag, nil
}

// judge sends a's counts to the fleet at once, from the call under
// verification that made them, and judges the change on the pooled
// counts it gets back, before the call returns: every replica decides on
// the fleet's calls as they come, not as the flushes bring them, so that
// a harmful change is rolled back after as many calls fleet-wide as one
// process needs. One call per agent and replica waits for it (the others
// only count, and their counts go with the next); not while backing off.
// rep gets the decision, if this call makes one.
// Its waits on the fleet are of the call's chain w (nil: its own).
func (fl *fleetLink) judge(a *agent, rep *Report, w *replica.Chain) {
	l := fl.l
	fa := a.fl
	if fl.Down() || l.isClosed.Load() || !fa.judging.CompareAndSwap(false, true) {
		return
	}
	defer fa.judging.Store(false)
	// A flush under way sends the counts too: the call waits for it
	// within its fleet time, and otherwise leaves its counts to it.
	w = fl.Chain(w)
	if left := w.Left(); left < fl.Timeout/10 || !fl.FlushMu.LockWithin(left) {
		return // its time is spent (lockWithin would wait without end)
	}
	defer fl.FlushMu.Unlock()
	if it, ok := fl.itemOf(a, false); ok {
		items := []fleetItem{it}
		if _, err := fl.send(items, rep, w); err == nil {
			fl.sendRest(items, rep, w)
		}
	}
}

// items returns the deltas of a flush: one per agent with calls, a
// change under verification, a resync or rewrite due, or on a poll; an
// agent's delta whose answer was lost goes again as it was.
func (fl *fleetLink) items(poll bool) []fleetItem {
	l := fl.l
	var items []fleetItem
	in := new(fleetInput) // one input for every agent's, in turn
	l.agents.Range(func(_, v any) bool {
		if it, ok := fl.take(v.(*agent), poll, in); ok {
			items = append(items, it)
		}
		return true
	})
	return items
}

// itemOf returns a's delta for a flush, if it has one to send (see
// items); FlushMu is held.
func (fl *fleetLink) itemOf(a *agent, poll bool) (fleetItem, bool) {
	return fl.take(a, poll, new(fleetInput))
}

// take is itemOf, with in for the input: a flush gives every agent the
// same one in turn (book), so that it allocates one input, not one an
// agent.
func (fl *fleetLink) take(a *agent, poll bool, in *fleetInput) (fleetItem, bool) {
	if a.fl == nil {
		return fleetItem{}, false
	}
	fl.book(a, in, fleetInput{kind: fleetTake, poll: poll}) // an evicted agent's is not taken (give: lockLive)
	return in.item, in.ok
}

// book gives a the bookkeeping input x (bookFleetLocked), held in in,
// which the caller reuses from one agent to the next (the driver keeps
// nothing of a bookkeeping input once give returns), and returns in.
func (fl *fleetLink) book(a *agent, in *fleetInput, x fleetInput) *fleetInput {
	*in = x
	fl.give(a, in, nil)
	return in
}

// takeDeltaLocked returns a's delta for a flush (replica, this
// replica's name), if it has one to send (see fleetLink.items): the
// delta whose answer was lost, as it was, or the counts since the last
// one. a.mu is held and a is live.
func (a *agent) takeDeltaLocked(replica string, poll bool, seq *atomic.Uint64) (it fleetItem, ok bool) {
	fa := a.fl
	switch {
	case fa.deltas.Pending() != nil:
		// Its answer was lost: the fleet may have booked it. Sent again
		// as it was, it counts once (FleetDelta.Batch).
		fa.flying = true
		return fleetItem{a: a, d: *fa.deltas.Pending(), again: true, prior: fa.pendingPrior}, true
	case poll || fa.tally.calls > 0 || a.s.Verifying != nil || fa.st.Owed():
		var d FleetDelta
		prior := fa.tally.hasPrior()
		if prior {
			// The calls of an earlier generation go first, on their own;
			// the current ones right after (sendRest).
			d = fa.tally.takePrior(a.id, replica)
		} else {
			t := fa.tally
			d = FleetDelta{AgentID: a.id, Replica: replica, Gen: t.gen, Change: t.change, Control: t.control, Failures: t.fails}
			fa.tally = fleetTally{gen: a.s.Gen}
		}
		for i := range d.Failures {
			d.Failures[i].Replica = replica
		}
		d.Batch = fa.deltas.Next(seq)
		fa.statsOwed = fa.statsOwed || own(&d)
		fa.flying = true
		return fleetItem{a: a, d: d, prior: prior}, true
	}
	return it, false
}

// stats adds the statistics of the items' agents that are due (see
// FleetDelta.Stats) to their deltas: those whose statistics are owed (a
// delta of this replica's calls, scores or costs went since they were
// last sent, or, once it has sent them, the fleet brought other
// replicas' calls: see pooled) and changed, at least
// fleetStatsEvery after they were last sent. A delta sent again goes as
// it was: the fleet may have booked it, and would not book statistics
// added to it.
func (fl *fleetLink) stats(items []fleetItem) {
	l := fl.l
	now := l.clock.Now().UnixNano()
	in := new(fleetInput)
	for i := range items {
		it := &items[i]
		if it.again {
			continue
		}
		if fl.book(it.a, in, fleetInput{kind: fleetStats, at: now}); !in.ok {
			continue
		}
		if b, err := encodeState(in.sh); err == nil && len(b) <= maxFleetStats {
			it.d.Stats = b
		}
	}
}

// sendRest sends, after the deltas of items went, the current counts of
// the agents whose delta was not them: a delta sent again after its
// answer was lost (again), then calls of other generations (prior). At
// most two more Adds, made only then, so that a flush (SyncFleet, Close)
// sends every count not sent yet. FlushMu is held.
func (fl *fleetLink) sendRest(items []fleetItem, rep *Report, w *replica.Chain) (lag int64, _ error) {
	for range 2 {
		var rest []fleetItem
		for i := range items {
			if items[i].prior || items[i].again {
				if it, ok := fl.itemOf(items[i].a, false); ok {
					rest = append(rest, it)
				}
			}
		}
		if len(rest) == 0 {
			return lag, nil
		}
		n, err := fl.send(rest, rep, w)
		lag = max(lag, n)
		if err != nil {
			return lag, err
		}
		items = rest
	}
	return lag, nil
}

// rewrite writes the state of the agents whose state the fleet lost,
// or holds invalid, again: this replica's copy (the first replica to do
// so wins; the others take its state). The commit that writes it ends
// the rewrite (fleetLink.swap), and so does taking a valid state from the
// fleet (fleetLink.adopt); a failure leaves it for the next flush.
func (fl *fleetLink) rewrite() {
	l := fl.l
	var due []*agent
	l.agents.Range(func(_, v any) bool {
		if a := v.(*agent); a.fl != nil {
			a.mu.Lock()
			if a.fl.st.Rewrite() {
				due = append(due, a)
			}
			a.mu.Unlock()
		}
		return true
	})
	for _, a := range due {
		l.persist(a) // its errors are the fleet's, reported by swap
	}
}

// SyncFleet sends the counts of the calls not sent yet to the fleet
// (WithFleet) and takes the fleet's newer state of every agent in memory,
// as the background flush does every WithFleetFlush interval; it also
// tells the fleet this replica is alive and reads the replicas seen
// (FleetReplicas). It returns
// nil at once without a fleet, and ErrClosed after Close. It waits no
// longer than ctx allows: when ctx ends first it returns ctx's error,
// and the sync, each of its operations bounded by the fleet timeout,
// goes on in the background (it gives up at ctx's deadline if the flush
// of another holds the flush's lock until then).
func (l *Loop) SyncFleet(ctx context.Context) error {
	if l.fleet == nil {
		return nil
	}
	if l.isClosed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	within := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		within = time.Until(dl)
	}
	done := make(chan error, 1)
	go func() {
		l.fleet.resyncAll()
		l.fleet.SeenNow()
		if !l.fleet.FlushMu.LockWithin(within) {
			done <- context.DeadlineExceeded
			return
		}
		defer l.fleet.FlushMu.Unlock()
		if l.isClosed.Load() {
			done <- ErrClosed // Close's own flush went first
			return
		}
		done <- l.fleet.flushLocked()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resyncAll has every live agent compared with the fleet's state at the
// next flush. No agent's lock is held.
func (fl *fleetLink) resyncAll() {
	l := fl.l
	in := new(fleetInput)
	l.agents.Range(func(_, v any) bool {
		if a := v.(*agent); a.fl != nil {
			fl.book(a, in, fleetInput{kind: fleetResync})
		}
		return true
	})
}

// isFleetErr reports whether err says that a decision did not reach the
// fleet.
func isFleetErr(err error) bool {
	return errors.Is(err, ErrFleetConflict) || errors.Is(err, ErrFleetUnavailable) || errors.Is(err, errFleetRefused)
}

// errFleetRefused: the fleet answered a commit with an error that is no
// outage (a missing right, a script's error); the decision was taken
// back.
var errFleetRefused = replica.ErrRefused

// errFleetSlow: the chain's fleet time is spent; the operation was not
// tried, and the fleet is not marked down (it answered, slowly).
var errFleetSlow = replica.ErrSlow

// logEvents queues events for the fleet's log, sent by the next flush
// (replica.Client.SendEvents), and asks for one.
func (fl *fleetLink) logEvents(evs []queued) {
	if len(evs) == 0 {
		return
	}
	events := make([]Event, len(evs))
	for i, q := range evs {
		events[i] = *q.ev
	}
	fl.LogEvents(events)
}
