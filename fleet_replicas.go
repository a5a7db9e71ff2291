package selfimprove

import (
	"sync/atomic"
	"time"
)

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

// fleetSeen notes this replica in the fleet, and reads the replicas
// seen, when replicaEvery has passed since it last did. flushMu is held.
func (l *Loop) fleetSeen(now time.Time) {
	fl := l.fleet
	b := &fl.replicas
	if !b.now.Swap(false) && !b.at.IsZero() && !now.Before(b.at) && now.Sub(b.at) < replicaEvery {
		return
	}
	b.at = now
	ctx, cancel := fl.ctx()
	_, err := fl.f.Note(ctx, noteReplica, fl.replica, "", now.Add(replicaTTL), now)
	cancel()
	if err != nil {
		l.fleetErr(nil, err)
		return
	}
	ctx, cancel = fl.ctx()
	seen, err := fl.f.Notes(ctx, noteReplica, now)
	cancel()
	if err != nil {
		l.fleetErr(nil, err)
		return
	}
	b.seen.Store(&seen)
}

// fleetGone ends this replica's note, at Close; not while the replica
// backs off (its note then ends on its own, replicaTTL after the last).
func (l *Loop) fleetGone() {
	fl := l.fleet
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
