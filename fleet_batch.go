package selfimprove

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// A decision either lands and is reported as done, or does not land and
// is reported as failed (docs/fleet.md, "Faults"). The replica's copy of
// an agent may hold several decisions not committed yet: one whose save
// is on its way to the fleet, and those made meanwhile, whose callers
// wait for the agent's save. When a commit fails, or a newer state from
// the fleet is taken, all of them are taken back at once (the copy goes
// back to the fleet's state). Each decision holds the fleetBatch of the
// decisions made since the agent's last save took its state; a save
// takes the batch with the state it commits, and a take-back marks the
// batches it undoes. A caller that finds its batch marked once it has
// the agent's save returns the mark's error instead of success.

// fleetBatch is the decisions made on an agent's copy since a save last
// took it. err, set under the agent's mu, is why they were taken back
// (nil: in force, or landed).
type fleetBatch struct{ err error }

// errTakenOver takes back the decisions not committed yet when the
// replica takes a newer state of the agent from the fleet.
var errTakenOver = fmt.Errorf("selfimprove: another replica decided first: %w", ErrFleetConflict)

// takeBatchLocked returns the batch of the decisions in a's copy, which
// a save is about to commit, and starts a new one. a.mu is held.
func (a *agent) takeBatchLocked() *fleetBatch {
	if a.fl == nil {
		return nil
	}
	b := a.fl.decided
	a.fl.decided = nil
	return b
}

// fail marks the batch b, which a save took and could not commit, as
// not committed for why. The agent's mu is held.
func (b *fleetBatch) fail(why error) {
	if b != nil && b.err == nil {
		b.err = why
	}
}

// takenBackLocked marks the decisions made on a's copy since a save last
// took it taken back for why (the copy goes back to a fleet's state);
// their events not logged yet go. a.mu is held.
func (a *agent) takenBackLocked(why error) {
	fa := a.fl
	if fa == nil || fa.decided == nil {
		return
	}
	cur := fa.decided
	fa.decided = nil
	cur.err = why
	if a.pending != nil {
		if *a.pending = slices.DeleteFunc(*a.pending, func(q queued) bool { return q.batch == cur }); len(*a.pending) == 0 {
			a.pending = nil
		}
	}
}

// takenBack is the error of a caller whose decision, of batch b, was
// taken back with another's while it waited for the agent's save; nil
// when it was not. a.mu is held.
func (b *fleetBatch) takenBack() error {
	if b == nil || b.err == nil {
		return nil
	}
	return fmt.Errorf("selfimprove: the decision was taken back with the agent's decisions not committed yet: %w", b.err)
}

// A decision whose commit failed without an answer (a timeout, a
// connection cut) may have landed: the fleet's script refuses to write
// past the commit's deadline, but an answer lost after the script ran in
// time leaves a commit reported as failed that landed (docs/fleet.md,
// "No ghost commits"). The replica keeps the state it tried to commit
// and the decision's events (replica.Orphan); when it later adopts a
// fleet state that holds that decision, it records the events after all,
// so that a config in force is never without its event.

// landedLocked reports the events of the orphan decision o (nil: none)
// if the fleet state val, just adopted, whose changes are changes, holds
// it: val is the state it tried to commit, or the changes its events
// name are in it and were not in the copy before (known). a.mu is held.
func (a *agent) landedLocked(o *replica.Orphan, val []byte, changes []Change, known map[string]bool) []queued {
	if o == nil {
		return nil
	}
	evs, _ := o.Payload.([]queued)
	if bytes.Equal(val, o.Value) {
		return evs
	}
	for _, q := range evs {
		if ch := q.ev.Change; ch != nil && !known[ch.ID] {
			for i := range changes {
				if sameDecision(&changes[i], ch) {
					return evs
				}
			}
		}
	}
	return nil
}

// sameDecision reports whether the change c in a state of the fleet's
// holds the decision ch, as this replica made it. An apply (ch under
// verification) is its change, whose ID only this replica made, in any
// state since. A confirmation or a rollback is the same change in the
// same state decided at the same time: another replica's decision on the
// same change (it confirmed or rolled back the change too, and its
// commit landed) is not this replica's, and its events are that
// replica's to record (TestFleetSchedules/faults, seed 9: a confirmation
// logged twice).
func sameDecision(c, ch *Change) bool {
	if c.ID != ch.ID {
		return false
	}
	return ch.State == ChangeVerifying || c.State == ch.State && c.DecidedAt.Equal(ch.DecidedAt)
}

// settleOrphansLocked checks the orphan decisions against the state of
// the fleet's the agent took last (its base: the copy may hold decisions
// made since, the orphan's among them when it was taken back) and
// returns the events of those it holds, which it drops. a.mu is held.
func (a *agent) settleOrphansLocked() []queued {
	st := &a.fl.st
	sh, err := decodeState(st.Base, a.id)
	if err != nil {
		return nil
	}
	var landed []queued
	st.Settle(func(o *replica.Orphan) bool {
		evs := a.landedLocked(o, st.Base, sh.Changes, nil)
		landed = append(landed, evs...)
		return evs != nil
	})
	return landed
}

// orphanLanded records the events of a decision reported as failed that
// reached the fleet after all, and says so in the log.
func (fl *fleetLink) orphanLanded(a *agent, evs []queued) {
	l := fl.l
	if len(evs) == 0 {
		return
	}
	l.log.Warn("selfimprove: a decision reported as failed reached the fleet after all (its answer was lost); recording its events",
		"agent", a.id, "events", len(evs))
	events := make([]Event, len(evs))
	for i, q := range evs {
		events[i] = *q.ev
	}
	if err := l.store.AppendEvents(events); err != nil {
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot record events", "agent", a.id, "count", len(evs), "error", err)
	}
	fl.logEvents(evs)
	for _, q := range evs {
		if !q.notified {
			l.notify(q.ev)
		}
	}
}
