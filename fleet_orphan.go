package selfimprove

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
// if the fleet state val, just adopted, holds it: val is the state it
// tried to commit, or the changes its events name are in the adopted
// state and were not in the one before (known). a.mu is held.
func (a *agent) landedLocked(o *replica.Orphan, val []byte, known map[string]bool) []queued {
	if o == nil {
		return nil
	}
	evs, _ := o.Payload.([]queued)
	if bytes.Equal(val, o.Value) {
		return evs
	}
	for _, q := range evs {
		if ch := q.ev.Change; ch != nil && !known[ch.ID] {
			for _, c := range a.s.Changes {
				if c.ID == ch.ID {
					return evs
				}
			}
		}
	}
	return nil
}

// orphanLanded records the events of a decision reported as failed that
// reached the fleet after all, and says so in the log.
func (l *Loop) orphanLanded(a *agent, evs []queued) {
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
	l.fleetLog(evs)
	for _, q := range evs {
		if !q.notified {
			l.notify(q.ev)
		}
	}
}
