package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
// This file has the link, the counts and the flusher that sends them;
// fleet_commit.go has the shared state: attaching an agent, adopting the
// fleet's state, committing decisions and the lease on a strategy run.

// fleetLink is a Loop's connection to its fleet.
type fleetLink struct {
	// Link is the fleet timeout, the back-off and the outage under way.
	replica.Link
	f        Fleet
	replica  string // this Loop's name in the fleet (a UUIDv7)
	interval time.Duration
	calls    int64

	kick    chan struct{} // asks the flusher for a flush now
	stop    chan struct{}
	done    chan struct{}
	unsub   func()
	flushMu replica.SaveLock        // serialises flushes
	polled  time.Time               // the last flush that asked for every agent; guarded by flushMu
	out     replica.Queue[noteItem] // notes for the fleet (fleet_notes.go), at most maxOutbox
	evs     replica.Queue[Event]    // events for the fleet's log (logEvents), at most maxFleetEvents
	rel     replica.Queue[*agent]   // leases for the flusher to give back (releaseLater), at most maxFleetReleases
	once    sync.Once
	badAt   atomic.Int64 // Unix ns: the last report of an invalid answer not an agent's
	// badStats is when the invalid statistics of agents not loaded here
	// were last reported (Unix ns), by agent ID, at most maxBadStats.
	badMu    sync.Mutex
	badStats map[string]int64

	replicas replicaBook // the replicas seen (fleet_notes.go)
	// manual: the flusher leaves a kick to the next flush (SyncFleet, the
	// interval), so that a test's schedule says when every flush runs
	// (TestingManualFlush).
	manual atomic.Bool

	// l is the Loop the link serves: the driver (step), the agents and
	// their files, the metrics and the log.
	l *Loop
}

// fleetPoll is how often a flush asks the fleet for the revision of every
// live agent, with or without counts to send: a notification lost (a
// subscriber reconnecting to Redis) is made up within it.
const fleetPoll = time.Second

func newFleetLink(o *options) *fleetLink {
	return &fleetLink{
		Link: replica.Link{Timeout: o.fleetTimeout}, f: o.fleet, replica: newID(time.Now()), interval: o.fleetInterval,
		calls: int64(o.fleetCalls), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		out: replica.Queue[noteItem]{Max: maxOutbox}, evs: replica.Queue[Event]{Max: maxFleetEvents},
		rel: replica.Queue[*agent]{Max: maxFleetReleases},
	}
}

// start subscribes to the fleet's notifications and starts the
// flusher.
func (fl *fleetLink) start() {
	fl.unsub = fl.f.Subscribe(fl.notified)
	go fl.run()
}

// close stops the flusher, sends the counts not sent yet, and
// unsubscribes. Close calls it before it seals the loop.
func (fl *fleetLink) close() error {
	var err error
	fl.once.Do(func() {
		close(fl.stop)
		<-fl.done
		err = fl.flush()
		fl.gone()
		fl.unsub()
	})
	return err
}

// ctx returns a context bounded by the fleet timeout.
func (fl *fleetLink) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), fl.Timeout)
}

// run flushes the counts every interval, or when enough calls are
// waiting, until close.
func (fl *fleetLink) run() {
	defer close(fl.done)
	var tick <-chan time.Time
	if fl.interval > 0 {
		t := time.NewTicker(fl.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
		case <-fl.kick:
			if fl.manual.Load() {
				continue
			}
		case <-fl.stop:
			return
		}
		fl.flush()
	}
}

// count books a finished call for the fleet; a's lock is held.
func (fl *fleetLink) count(a *agent, c *call) {
	if c.ignored {
		return
	}
	a.fl.tally.count(c, a.s.Gen)
	if a.fl.tally.calls == fl.calls {
		fl.kickFlush()
	}
}

// onErr takes an error of the fleet about agent a (nil: of no agent):
// the fleet could not be reached (wentDown), or it refused or held
// invalid data (bad).
func (fl *fleetLink) onErr(a *agent, err error) {
	l := fl.l
	switch {
	case errors.Is(err, errFleetSlow):
		l.m.fleetErrors.Add(1) // the fleet answers slowly: not down (see cut)
	case errors.Is(err, ErrFleetUnavailable):
		fl.wentDown(err)
	default:
		fl.bad(a, err)
	}
}

// fleetBadEvery is how often an agent's invalid data in the fleet is
// reported (a log line); Metrics.FleetErrors counts every time.
const fleetBadEvery = time.Minute

// bad reports an answer of the fleet that is no outage: invalid
// data of agent a (nil: of no agent), set aside or to be replaced, or a
// refusal. It logs at most once per fleetBadEvery per agent.
func (fl *fleetLink) bad(a *agent, err error) {
	l := fl.l
	l.m.fleetErrors.Add(1)
	at := &fl.badAt
	if a != nil && a.fl != nil {
		at = &a.fl.badAt
	}
	now, last := l.clock.Now().UnixNano(), at.Load()
	if last != 0 && now-last < int64(fleetBadEvery) || !at.CompareAndSwap(last, now) {
		return
	}
	if a != nil {
		l.log.Error("selfimprove: the fleet refused, or holds invalid data for, the agent; its state is written again (reported once a minute)", "agent", a.id, "error", err)
	} else {
		l.log.Error("selfimprove: the fleet refused an operation, or answered with invalid data (reported once a minute)", "error", err)
	}
}

// fleetSettle is how long the fleet must answer after a failure for an
// outage to be over: then its EventFleetRecovered is sent, and the next
// failure is a new outage. A failure within it belongs to the same
// outage, which sends no second event.
const fleetSettle = time.Second

// wentDown notes that the fleet could not be reached: the replica backs
// off until the flusher finds it again. At the first failure of an
// outage, a log line and a stored EventFleetUnreachable.
func (fl *fleetLink) wentDown(err error) {
	l := fl.l
	l.m.fleetErrors.Add(1)
	now := l.clock.Now()
	if !fl.Failed(now.UnixNano()) {
		return // backing off already, or the fleet had not answered for fleetSettle since the last failure
	}
	l.m.fleetOutages.Add(1)
	l.log.Error("selfimprove: fleet unreachable: calls keep their configs, and no change is applied until it is back", "error", err)
	fl.event(&Event{ID: newID(now), Time: now.UTC(), Type: EventFleetUnreachable,
		Message: fmt.Sprintf("fleet unreachable: %v; calls keep their configs, no change is applied until it is back", err)})
}

// cameUp notes that the fleet answered: after it was down, every live
// agent is compared with the fleet's state at the next flush; once it
// has answered for fleetSettle, the outage is over, with a log line and
// a stored EventFleetRecovered.
func (fl *fleetLink) cameUp() {
	l := fl.l
	now := l.clock.Now()
	back, over, d := fl.Answered(now.UnixNano(), fleetSettle)
	if back {
		fl.resyncAll()
		fl.kickFlush()
		return
	}
	if !over {
		return
	}
	d = d.Round(time.Millisecond)
	l.log.Info("selfimprove: fleet reachable again; resynchronised", "outage", d)
	fl.event(&Event{ID: newID(now), Time: now.UTC(), Type: EventFleetRecovered,
		Message: fmt.Sprintf("fleet reachable again after %v: configs resynchronised, counts sent", d)})
}

// event writes ev, an event of the fleet's link, to the store (it
// concerns no agent, and no decision waits for it) and hands it on.
func (fl *fleetLink) event(ev *Event) {
	l := fl.l
	if l.enterWrite() {
		if err := l.store.AppendEvents([]Event{*ev}); err != nil {
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
	l := fl.l
	fl.flushMu.Lock()
	defer fl.flushMu.Unlock()
	now := l.clock.Now()
	poll := now.Sub(fl.polled) >= fleetPoll || now.Before(fl.polled)
	if poll {
		fl.polled = now
	}
	fl.pollNotes(now, poll)
	fl.seen(now)
	items := fl.items(poll)
	fl.stats(items)
	lag, err := fl.send(items, nil, nil)
	if err == nil {
		var more int64
		more, err = fl.sendRest(items, nil, nil)
		lag = max(lag, more)
	}
	if err == nil && len(items) > 0 {
		l.m.fleetLag.Store(lag)
	}
	fl.sendEvents()
	fl.releases()
	fl.rewrite()
	return err
}

// send sends the deltas of items in one Add and takes back the pooled
// counts (pooled; rep, when set, gets a decision they make). It
// returns the most revisions an agent's copy was behind. flushMu is held.
// Its waits on the fleet, and those of the decisions the counts make, are
// of the chain w (nil: the Add and each decision a chain of its own).
func (fl *fleetLink) send(items []fleetItem, rep *Report, w *replica.Chain) (lag int64, _ error) {
	l := fl.l
	if len(items) == 0 {
		return 0, nil
	}
	deltas := make([]FleetDelta, len(items))
	for i := range items {
		deltas[i] = items[i].d
	}
	var pools []FleetPool
	err := errFleetSlow
	if ctx, done, ok := fl.Op(w); ok {
		pools, err = fl.f.Add(ctx, deltas)
		err = replica.Cut(ctx, err)
		done()
	}
	if err == nil && len(pools) != len(items) {
		err = fmt.Errorf("selfimprove: fleet: %d answers to %d deltas", len(pools), len(items))
	}
	if err != nil {
		if err != errFleetSlow { // not tried: no error of the fleet's
			fl.onErr(nil, err)
		}
		// Unreachable: the deltas are sent again as they are. Refused
		// (no outage): they would be refused again, and are dropped.
		again := errors.Is(err, ErrFleetUnavailable)
		for _, it := range items {
			it.a.mu.Lock()
			it.a.fl.deltas.Answered(it.d, again)
			it.a.fl.pendingPrior = again && it.prior
			it.a.mu.Unlock()
		}
		return 0, fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
	}
	fl.cameUp()
	for i := range items {
		a := items[i].a
		a.mu.Lock()
		a.fl.deltas.Answered(items[i].d, false)
		a.fl.pendingPrior = false
		a.mu.Unlock()
		if pools[i].Err != nil {
			fl.bad(a, pools[i].Err)
		}
		if n := fl.pooled(a, &items[i], &pools[i], rep, w); n > 0 {
			l.m.fleetBehind.Add(1)
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
	if left := w.Left(); left < fl.Timeout/10 || !fl.flushMu.LockWithin(left) {
		return // its time is spent (lockWithin would wait without end)
	}
	defer fl.flushMu.Unlock()
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
	l.agents.Range(func(_, v any) bool {
		if it, ok := fl.itemOf(v.(*agent), poll); ok {
			items = append(items, it)
		}
		return true
	})
	return items
}

// itemOf returns a's delta for a flush, if it has one to send (see
// items); flushMu is held.
func (fl *fleetLink) itemOf(a *agent, poll bool) (it fleetItem, ok bool) {
	l := fl.l
	fa := a.fl
	if fa == nil {
		return it, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settleFleetLocked(l)
	switch {
	case a.evicted:
	case fa.deltas.Pending() != nil:
		// Its answer was lost: the fleet may have booked it. Sent again
		// as it was, it counts once (FleetDelta.Batch).
		return fleetItem{a: a, d: *fa.deltas.Pending(), again: true, prior: fa.pendingPrior}, true
	case poll || fa.tally.calls > 0 || a.s.Verifying != nil || fa.st.Owed():
		var d FleetDelta
		prior := fa.tally.hasPrior()
		if prior {
			// The calls of an earlier generation go first, on their own;
			// the current ones right after (sendRest).
			d = fa.tally.takePrior(a.id, fl.replica)
		} else {
			t := fa.tally
			d = FleetDelta{AgentID: a.id, Replica: fl.replica, Gen: t.gen, Change: t.change, Control: t.control, Failures: t.fails}
			fa.tally = fleetTally{gen: a.s.Gen}
		}
		for i := range d.Failures {
			d.Failures[i].Replica = fl.replica
		}
		d.Batch = fa.deltas.Next()
		fa.statsOwed = fa.statsOwed || own(&d)
		return fleetItem{a: a, d: d, prior: prior}, true
	}
	return it, false
}

// sendRest sends, after the deltas of items went, the current counts of
// the agents whose delta was not them: a delta sent again after its
// answer was lost (again), then calls of other generations (prior). At
// most two more Adds, made only then, so that a flush (SyncFleet, Close)
// sends every count not sent yet. flushMu is held.
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
// nil at once without a fleet, and ErrClosed after Close.
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
	l.fleet.resyncAll()
	l.fleet.replicas.now.Store(true)
	return l.fleet.flush()
}

// resyncAll has every live agent compared with the fleet's state at the
// next flush. No agent's lock is held.
func (fl *fleetLink) resyncAll() {
	l := fl.l
	l.agents.Range(func(_, v any) bool {
		if a := v.(*agent); a.fl != nil {
			a.mu.Lock()
			a.fl.st.Resync()
			a.mu.Unlock()
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
var errFleetRefused = errors.New("selfimprove: the fleet refused the decision")

// settleFleetLocked settles a (not once it is evicted) before the fleet's
// code reads or changes its state. a.mu is held.
func (a *agent) settleFleetLocked(l *Loop) {
	if !a.evicted {
		a.settleLocked(l.clock.Now().UnixNano())
	}
}

// replicasSeen counts the replicas seen alive at now (Metrics).
func (fl *fleetLink) replicasSeen(now time.Time) (n int64) {
	if seen := fl.replicas.seen.Load(); seen != nil {
		for _, r := range *seen {
			if r.Until.After(now) {
				n++
			}
		}
	}
	return n
}

// errFleetSlow: the chain's fleet time is spent; the operation was not
// tried, and the fleet is not marked down (it answered, slowly).
var errFleetSlow = replica.ErrSlow

// callWait returns the fleet time *w of a call of a, which its load of
// the agent, a probe's claim, its decision's save (the wait for the
// agent's save included) and its counts under verification share; it
// starts it if the call has not waited on the fleet yet. Nil without a
// fleet.
func (l *Loop) callWait(a *agent, w **replica.Chain) *replica.Chain {
	if a.fl != nil && *w == nil {
		*w = l.fleet.Chain(nil)
	}
	return *w
}

// maxFleetEvents bounds the events waiting for the flusher to go to the
// fleet's log; beyond it the oldest are dropped (they are in the store).
const maxFleetEvents = 4096

// logEvents queues events for the fleet's log, sent by the next flush
// (sendEvents), and asks for one.
func (fl *fleetLink) logEvents(evs []queued) {
	l := fl.l
	if len(evs) == 0 {
		return
	}
	events := make([]Event, len(evs))
	for i, q := range evs {
		events[i] = *q.ev
	}
	if n := fl.evs.PushDrop(events...); n > 0 {
		l.m.fleetErrors.Add(1)
		l.log.Error("selfimprove: events for the fleet's log dropped: the fleet has not taken them", "count", n)
	}
	fl.kickFlush()
}

// sendEvents sends the queued events to the fleet's log; while the
// fleet cannot be reached they wait for the next flush, a refusal drops
// them. flushMu is held.
func (fl *fleetLink) sendEvents() {
	evs := fl.evs.Take()
	if len(evs) == 0 || fl.Down() {
		fl.evs.Requeue(evs)
		return
	}
	ctx, cancel := fl.ctx()
	err := fl.f.AppendEvents(ctx, evs)
	cancel()
	switch {
	case err == nil:
		fl.cameUp()
	case errors.Is(err, ErrFleetUnavailable):
		fl.onErr(nil, err)
		fl.evs.Requeue(evs)
	default:
		fl.onErr(nil, fmt.Errorf("cannot add %d events to the fleet's log: %w", len(evs), err))
	}
}
