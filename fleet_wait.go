package selfimprove

import (
	"errors"
	"fmt"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

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

// fleetLog queues events for the fleet's log, sent by the next flush
// (fleetSendEvents), and asks for one.
func (l *Loop) fleetLog(evs []queued) {
	if len(evs) == 0 {
		return
	}
	events := make([]Event, len(evs))
	for i, q := range evs {
		events[i] = *q.ev
	}
	if n := l.fleet.evs.PushDrop(events...); n > 0 {
		l.m.fleetErrors.Add(1)
		l.log.Error("selfimprove: events for the fleet's log dropped: the fleet has not taken them", "count", n)
	}
	l.fleetKick()
}

// fleetSendEvents sends the queued events to the fleet's log; while the
// fleet cannot be reached they wait for the next flush, a refusal drops
// them. flushMu is held.
func (l *Loop) fleetSendEvents() {
	fl := l.fleet
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
		l.fleetUp()
	case errors.Is(err, ErrFleetUnavailable):
		l.fleetErr(nil, err)
		fl.evs.Requeue(evs)
	default:
		l.fleetErr(nil, fmt.Errorf("cannot add %d events to the fleet's log: %w", len(evs), err))
	}
}
