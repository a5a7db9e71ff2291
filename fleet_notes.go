package selfimprove

import (
	"errors"
	"fmt"
	"time"

	"sync/atomic"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// What one replica learns of every agent, shared through the fleet's
// notes (Fleet.Note): dead routes and account-wide causes; and the probes
// of the primary and of held agents, which one replica claims at a time
// (see docs/fleet.md). Notes are sent and read by the flusher, never on
// the call path; a probe's claim is a commit on the call that probes, at
// most one per agent and interval on each replica.

// Note kinds.
const (
	noteRoute = "route"
	noteCause = "cause"
)

// noteItem is a note waiting to be sent. For a cause, a and h say what
// to raise when the fleet did not know of it, or what ended.
type noteItem struct {
	kind, name, reason string
	until, now         time.Time
	a                  *agent
	h                  *holdNote
}

// maxOutbox bounds the notes waiting to be sent; beyond it a cause is
// raised (or ended) on this replica alone, and a dead route stays local.
const maxOutbox = 256

// causeTTL is how long a cause's note lasts without a renewal: a replica
// holding agents for it renews it every MaxEvery, so that a replica that
// died leaves no cause behind for long.
func (p *ProbePolicy) causeTTL() time.Duration { return 3 * p.MaxEvery }

// post queues a note for the flusher, and asks for a flush. It
// reports false when the outbox is full.
func (fl *fleetLink) post(n noteItem) bool {
	ok := fl.out.Push(n)
	fl.kickFlush()
	return ok
}

// posted hands n to the fleet (fleetLink.post), which decides whether this
// replica raises the cause or its end (see pollNotes). It reports false
// without a fleet, or with the outbox full: then this replica decides.
func (l *Loop) posted(n noteItem) bool { return l.fleet != nil && l.fleet.post(n) }

// pollNotes sends the queued notes and renews the causes in force here;
// on a poll it takes the fleet's dead routes. A cause the fleet did not
// know (or could not be asked of) is raised here; the end of one it knew
// is told here.
func (fl *fleetLink) pollNotes(now time.Time, poll bool) {
	l := fl.l
	items := fl.out.Take()
	p := &l.rules.probes
	for _, id := range l.causes.due(now.UnixNano(), int64(p.MaxEvery)) {
		items = append(items, noteItem{kind: noteCause, name: id, until: now.Add(p.causeTTL()), now: now})
	}
	for _, n := range items {
		ctx, cancel := fl.ctx()
		was, err := fl.f.Note(ctx, n.kind, n.name, n.reason, n.until, n.now)
		cancel()
		if err != nil {
			fl.onErr(nil, err)
		}
		switch {
		case n.h == nil:
		case n.h.ended && (was || err != nil):
			l.causeEnded(n.a, n.h, n.name, now)
		case !n.h.ended && (!was || err != nil):
			l.accountCause(n.a, n.h, n.name, n.now, nil)
		}
	}
	if !poll {
		return
	}
	ctx, cancel := fl.ctx()
	dead, err := fl.f.Notes(ctx, noteRoute, now)
	cancel()
	if err != nil {
		fl.onErr(nil, err)
		return
	}
	fl.cameUp()
	for _, d := range dead {
		l.dead.mark(d.Route, d.Until.UnixNano(), freeText(d.Reason), failure.ClassModelUnavailable, now.UnixNano())
	}
}

// causeEnded tells that the account-wide cause c is over.
func (l *Loop) causeEnded(a *agent, h *holdNote, c string, now time.Time) {
	l.notify(&Event{ID: newID(now), Time: now.UTC(), Type: EventAccountRecovered,
		Message: fmt.Sprintf("account-wide %s cause %s is over: agent %q got through", h.class, c, a.id)})
}

// claim claims the probe c is about to run, in a fleet (see claimProbe).
// When another replica took it, a probe of the primary becomes a plain
// call, and claim returns false for a held agent's probe: the call fails
// fast.
func (l *Loop) claim(a *agent, c *begun) bool {
	if l.fleet == nil || (!c.probe && !c.homeProbe) {
		return true
	}
	c.fw = l.fleet.Chain(c.fw) // the load of a new agent, the claim and the call's decision share it
	c.fw.Resume()
	ok := l.fleet.claimProbe(a, c.homeProbe, c.fw)
	c.fw.Pause() // fn runs now: its time is its own (resumed in finish)
	if ok {
		return true
	}
	a.set(flagProbing, false)
	c.probe, c.homeProbe = false, false
	return false
}

// claimProbe makes the probe a call is about to run (of the primary, or
// of a held agent) this replica's alone: it commits the next probe time,
// one interval on, before the probe runs, so that the other replicas
// wait. It reports false when another replica claimed it first, or no
// probe is due any more. Without a fleet, or with the fleet unreachable,
// the replica probes on its own.
//
// The claim is a decision like the others: it is committed under the
// agent's save lock, so that the replica's own save of another decision
// (the hold a call just made, say) never makes it lose as if another
// replica had claimed the probe. A claim that cannot have the lock within
// the call's fleet time does not probe.
func (fl *fleetLink) claimProbe(a *agent, home bool, w *replica.Chain) bool {
	l := fl.l
	if a.fl == nil || fl.Down() || !l.enterWrite() {
		return true
	}
	defer l.leaveWrite()
	if left := w.Left(); left < fl.Timeout/10 || !a.saveMu.LockWithin(left) {
		return false // (lockWithin would wait without end on a spent time)
	}
	defer a.saveMu.Unlock()
	// The claim is a save: a compare-and-set on the revision the claim was
	// made at, under the same lock (a newer state taken meanwhile, another
	// replica's claim, makes it fail, never pass unseen), which takes the
	// decisions made on the copy and not saved yet with it, as any save.
	breaker, due := false, false
	err := l.saveHeld(a, w, nil, func() bool {
		a.settleFleetLocked(l)
		if !home && (a.s.Route == nil || a.s.Route.Hold == "") {
			breaker = true // a breaker's probe: the breaker is each replica's own
			return false
		}
		if due = a.s.claimProbe(l.clock.Now().UnixNano(), home, &l.rules); due {
			eff := effects{probe: home, circuit: !home}
			a.commitLocked(&eff, l.canaryCut > 0)
			a.dirty = true
		}
		return due
	})
	switch {
	case breaker:
		return true
	case !due:
		return false
	}
	return !errors.Is(err, ErrFleetConflict)
}

// The replicas seen: each replica tells the fleet it is alive with a note
// of kind "replica" (Fleet.Note) named after it, every replicaEvery and
// until replicaTTL later, and reads the others' notes on the same
// cadence, from the flusher, never on the call path, each operation
// under the fleet timeout. Close ends its note; a replica that died
// without Close drops out when its note ends.

const (
	// noteReplica is the kind of a replica's note.
	noteReplica = "replica"
	// replicaEvery is how often a replica notes itself and reads the
	// replicas seen.
	replicaEvery = 5 * time.Second
	// replicaTTL is how long a replica's note lasts without a renewal:
	// four renewals missed.
	replicaTTL = 20 * time.Second
)

// replicaBook is what a replica knows of the others.
type replicaBook struct {
	at   time.Time                   // the last note; guarded by flushMu
	seen atomic.Pointer[[]DeadRoute] // the latest read: Route is a replica's name, Until its note's end
	now  atomic.Bool                 // the next flush notes and reads at once (SyncFleet)
}

// seen notes this replica in the fleet, and reads the replicas
// seen, when replicaEvery has passed since it last did. flushMu is held.
func (fl *fleetLink) seen(now time.Time) {
	b := &fl.replicas
	if !b.now.Swap(false) && !b.at.IsZero() && !now.Before(b.at) && now.Sub(b.at) < replicaEvery {
		return
	}
	b.at = now
	ctx, cancel := fl.ctx()
	_, err := fl.f.Note(ctx, noteReplica, fl.replica, "", now.Add(replicaTTL), now)
	cancel()
	if err != nil {
		fl.onErr(nil, err)
		return
	}
	ctx, cancel = fl.ctx()
	seen, err := fl.f.Notes(ctx, noteReplica, now)
	cancel()
	if err != nil {
		fl.onErr(nil, err)
		return
	}
	b.seen.Store(&seen)
}

// gone ends this replica's note, at Close; not while the replica
// backs off (its note then ends on its own, replicaTTL after the last).
func (fl *fleetLink) gone() {
	l := fl.l
	if fl.Down() {
		return
	}
	now := l.clock.Now()
	ctx, cancel := fl.ctx()
	defer cancel()
	fl.f.Note(ctx, noteReplica, fl.replica, "", now, now)
}

// FleetReplicas returns the replicas of the fleet (WithFleet) seen alive,
// this one among them once it has told the fleet, by name (their
// Metrics.FleetReplica), with when each last told the fleet it was
// alive. Each replica does so every 5 seconds from its background flush
// (every WithFleetFlush interval; with an interval of 0, at its flushes
// only), and at SyncFleet, and reads the others' on the same cadence:
// the answer is up to 5 seconds old. A replica closed drops out at once, one that died
// without Close 20 seconds after it was last seen. The fleet keeps at
// most MaxFleetNotes of them. It returns nil without a fleet, or before
// the first read.
func (l *Loop) FleetReplicas() map[string]time.Time {
	if l.fleet == nil {
		return nil
	}
	seen := l.fleet.replicas.seen.Load()
	if seen == nil {
		return nil
	}
	now := l.clock.Now()
	out := make(map[string]time.Time, len(*seen))
	for _, r := range *seen {
		if r.Until.After(now) {
			out[r.Route] = r.Until.Add(-replicaTTL)
		}
	}
	return out
}
