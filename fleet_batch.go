package selfimprove

import (
	"fmt"
	"slices"
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
