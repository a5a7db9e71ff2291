package selfimprove

import "bytes"

// fleetOrphan is a decision whose commit failed without an answer (a
// timeout, a connection cut): the fleet's script refuses to write past
// the commit's deadline, but an answer lost after the script ran in time
// leaves a commit reported as failed that landed (docs/fleet.md, "No
// ghost commits"). The replica keeps the state it tried to commit and
// the decision's events; when it later adopts a fleet state that holds
// that decision, it records the events after all, so that a config in
// force is never without its event.
type fleetOrphan struct {
	rev   uint64 // the revision the commit was made at
	value []byte
	evs   []queued
}

// keepOrphan keeps the decision value (with its events evs) whose
// commit failed without an answer, in place of an older one.
func (l *Loop) keepOrphan(a *agent, rev uint64, value []byte, evs []queued) {
	if len(evs) == 0 {
		return // nothing would go unrecorded
	}
	a.mu.Lock()
	a.fl.orphan = &fleetOrphan{rev: rev, value: value, evs: evs}
	a.mu.Unlock()
}

// landedLocked reports the events of the agent's orphan decision if the
// fleet state val, just adopted at revision rev, holds it: val is the
// state it tried to commit, or the changes its events name are in the
// adopted state and were not in the one before (known). The orphan is
// dropped at the first revision past the one it was committed at, landed
// or not: the fleet has moved on. a.mu is held.
func (a *agent) landedLocked(rev uint64, val []byte, known map[string]bool) []queued {
	o := a.fl.orphan
	if o == nil || rev <= o.rev {
		return nil
	}
	a.fl.orphan = nil
	if bytes.Equal(val, o.value) {
		return o.evs
	}
	for _, q := range o.evs {
		if ch := q.ev.Change; ch != nil && !known[ch.ID] {
			for _, c := range a.s.Changes {
				if c.ID == ch.ID {
					return o.evs
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
