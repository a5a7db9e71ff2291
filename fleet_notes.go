package selfimprove

import (
	"errors"
	"fmt"
	"time"

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

// maxOutbox bounds the notes waiting to be sent; beyond it a cause is
// raised (or ended) on this replica alone, and a dead route stays local.
const maxOutbox = 256

// causeTTL is how long a cause's note lasts without a renewal: a replica
// holding agents for it renews it every MaxEvery, so that a replica that
// died leaves no cause behind for long.
func (p *ProbePolicy) causeTTL() time.Duration { return 3 * p.MaxEvery }

// postDead tells the fleet that the route of d is dead (until d.until),
// as seen now (replica.Client.Post). It reports whether the note went to
// the outbox: false without a fleet, or with the outbox full.
func (l *Loop) postDead(d deadNote, now time.Time) bool {
	return l.fleet != nil && l.fleet.Post(replica.Note{Kind: noteRoute, Name: d.route, Reason: d.why, Until: time.Unix(0, d.until), Now: now})
}

// postCause hands the fleet the note of the account-wide cause id that
// agent a's hold h raises or ends (causeNote); the fleet decides whether
// this replica raises the cause or its end (its Then). It reports false
// without a fleet, or with the outbox full: then this replica decides.
func (l *Loop) postCause(a *agent, h *holdNote, id, reason string, until, now time.Time) bool {
	return l.fleet != nil && l.fleet.Post(l.causeNote(a, h, id, reason, until, now))
}

// pollNotes sends the queued notes and renews the causes in force here;
// on a poll it takes the fleet's dead routes. FlushMu is held.
func (fl *fleetLink) pollNotes(now time.Time, poll bool) {
	l := fl.l
	p := &l.rules.probes
	var renew []replica.Note
	for _, id := range l.causes.due(now.UnixNano(), int64(p.MaxEvery)) {
		renew = append(renew, replica.Note{Kind: noteCause, Name: id, Until: now.Add(p.causeTTL()), Now: now})
	}
	fl.SendNotes(now, renew)
	if !poll {
		return
	}
	dead, ok := fl.Read(noteRoute, now)
	if !ok {
		return
	}
	fl.Up()
	for _, d := range dead {
		l.dead.mark(d.Route, d.Until.UnixNano(), freeText(d.Reason), failure.ClassModelUnavailable, now.UnixNano())
	}
}

// causeNote is the note of the account-wide cause id that agent a's
// hold h raises (until its end) or ends (until now): a cause the fleet
// did not know, or could not be asked of, is raised here, at the time of
// the call; the end of one it knew is told here, at the time of the
// flush that learned it.
func (l *Loop) causeNote(a *agent, h *holdNote, id, reason string, until, now time.Time) replica.Note {
	return replica.Note{Kind: noteCause, Name: id, Reason: reason, Until: until, Now: now, Then: func(sent time.Time, was bool, err error) {
		switch {
		case h.ended && (was || err != nil):
			l.causeEnded(a, h, id, sent)
		case !h.ended && (!was || err != nil):
			l.accountCause(a, h, id, now, waits{})
		}
	}}
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
	c.w.c = l.fleet.Chain(c.w.c) // the load of a new agent, the claim and the call's decision share it
	c.w.resume()
	ok := l.fleet.claimProbe(a, c.homeProbe, c.w.c)
	c.w.pause() // fn runs now: its time is its own (resumed in finish)
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
	in := input{kind: inClaim, lock: lockHeld, more: &inputMore{home: home}}
	x := in.more
	err := l.saveHeld(a, waits{w}, nil, func() bool {
		l.applyHeld(a, &in)
		return x.due
	})
	switch {
	case x.breaker:
		return true
	case !x.due:
		return false
	}
	return !errors.Is(err, ErrFleetConflict)
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
	return l.fleet.Replicas(l.clock.Now())
}
