package selfimprove

// The decisions whose commits' answers were lost (replica.Orphan): how
// the Loop recognizes one in a state of the fleet's, and records it.

import (
	"bytes"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

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
	if err := guard("AppendEvents", func() error { return l.store.AppendEvents(events) }); err != nil {
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
