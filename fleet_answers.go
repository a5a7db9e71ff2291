package selfimprove

import (
	"context"
	"slices"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The fleet's answers as inputs of the driver (Loop.step, inFleet): a
// commit's outcome, its resolution after a conflict, a load, a
// notification, a state to take. Each is given to the agent's
// replication (replica.State) under the agent's lock, and a state taken
// changes the agent's own state in the same transition; what the answer
// asks for after the lock (the replication's Next, the events of a
// decision whose lost answer landed) is carried out by the driver
// (fleetLink.carry), and an answer that comes of it (a state taken, a
// conflict resolved) is an input of its own.

// fleetAnswer says which answer of the fleet a fleetInput is.
type fleetAnswer uint8

const (
	fleetCommitted fleetAnswer = iota + 1 // a commit's outcome: c, out, rev (the new one), keep, evs, why
	fleetResolved                         // a conflict's resolution: c, asked (by the conflict's refresh), why
	fleetLoaded                           // a load: since, rev, val, res, why (of a take-back)
	fleetNotified                         // another replica's commit announced: rev
	fleetAdopt                            // a state to take: ad, sh (valid: it decoded), why (of a take-back)
)

// fleetInput is an answer of the fleet's, given to the agent's state
// machine by the driver.
type fleetInput struct {
	kind fleetAnswer
	why  error // the error of the commit, or the reason of a take-back

	c    replica.Commit
	out  replica.Outcome
	keep any      // the events of a commit whose answer was lost
	evs  []queued // a commit's events, logged by the fleet once it landed

	since, rev uint64
	val        []byte
	res        replica.Load

	ad    replica.Adopt
	sh    *agentState
	valid bool

	// asked: for fleetLoaded, set by the transition, whether the load
	// could ask the fleet; for fleetResolved, whether the conflict's
	// refresh could.
	asked bool
	// next is what the transition found the answer asks, for the driver
	// to carry out after the lock.
	next fleetNext
}

// fleetNext is what an answer of the fleet's asks the driver to carry
// out after the lock (fleetLink.carry), in this order.
type fleetNext struct {
	props  []Proposal // the proposals of a state taken, for the index (taken)
	taken  bool
	landed []queued // the events of a decision whose lost answer landed after all
	logged []queued // a landed commit's events, for the fleet's log
	lost   bool     // the fleet lost the agent's state: it is written again
	kick   bool     // a flush now
	next   replica.Next
	why    error       // the reason of a take-back next asks
	then   *fleetInput // a conflict's resolution, once next is carried out
	notice bool        // a newer revision announced: refresh
}

// give gives the fleet's answer in to a's state machine (Loop.step) and
// carries out what it asks; its waits on the fleet are of the chain w.
// A state taken is given to an agent still live only (lockLive); the
// other answers to the agent as it is.
func (fl *fleetLink) give(a *agent, in *fleetInput, w *replica.Chain) {
	lock := lockThis
	if in.kind == fleetAdopt {
		lock = lockLive
	}
	var rep Report
	fl.l.step(context.Background(), a, a.id, &input{kind: inFleet, lock: lock, more: &inputMore{fleet: in}}, &rep, w)
}

// applyFleet applies the fleet's answer in: to a's replication, and,
// for a state taken, to its state. a.mu is held and a is settled.
func (a *agent) applyFleet(l *Loop, in *fleetInput, eff *effects) {
	st := &a.fl.st
	fx := &in.next
	fx.why = in.why
	switch in.kind {
	case fleetCommitted:
		fx.next = st.Committed(in.c, in.out, in.rev, in.keep)
		if fx.next.Check {
			// A state of the fleet's taken while the commit was in flight
			// may hold the decision whose answer was lost: checked before
			// the lock goes, so that no newer state is taken first.
			fx.landed = a.settleOrphansLocked()
			fx.next.Check = false
		}
		switch in.out {
		case replica.Landed:
			fx.logged = in.evs
		case replica.Conflict:
			fx.then = &fleetInput{kind: fleetResolved, c: in.c, why: in.why}
		}
	case fleetResolved:
		fx.next = st.Resolved(in.c, in.asked)
	case fleetLoaded:
		fx.next, in.asked = st.Loaded(in.since, in.rev, in.val, in.res)
		fx.lost = fx.next.Lost
	case fleetNotified:
		fx.notice = st.Notified(in.rev)
	case fleetAdopt:
		a.adoptLocked(l, in, eff, fx)
	}
}

// adoptLocked takes the fleet's state in.sh, when the replication takes
// it (replica.State.Take), into a's: the decisions not committed yet are
// taken back for in.why; a keeps its call statistics. a.mu is held.
func (a *agent) adoptLocked(l *Loop, in *fleetInput, eff *effects, fx *fleetNext) {
	fa := a.fl
	take, kick := fa.st.Take(in.ad, in.valid)
	if !take {
		fx.kick = kick
		return
	}
	known := make(map[string]bool, len(a.s.Changes))
	for _, ch := range a.s.Changes {
		known[ch.ID] = true
	}
	learned := decidedIn(fa.st.Base, a.id)
	a.takenBackLocked(in.why)
	a.s.adopt(in.sh)
	a.s.threshold(l.clock.Now().UnixNano()) // the window's width follows the threshold at once
	base, _ := encodeShared(&a.s)
	due := fa.st.Took(base)
	if fa.tally.gen != a.s.Gen {
		fa.tally.moveTo(a.s.Gen) // its calls so far count in the fleet's totals
	}
	a.dirty = true
	eff.publish, eff.circuit = true, true
	eff.learned = append(eff.learned, fixesOf(a.s.Changes, learned)...)
	fx.taken, fx.props = true, a.s.snapshot().Proposals
	if len(due) > 0 {
		chs := a.s.Changes
		if a.s.Verifying != nil { // an apply whose answer was lost, on which others committed since
			chs = append(slices.Clip(chs), a.s.verifying())
		}
		for i := range due {
			fx.landed = append(fx.landed, a.landedLocked(&due[i], in.ad.Value, chs, known)...)
		}
	}
}

// carry carries out what an answer of the fleet's asked (fx), after a's
// lock: the proposals of a state taken listed, the events of a decision
// whose lost answer landed recorded, a landed commit's events queued for
// the fleet's log, then the replication's Next (fleetLink.next) and the
// answer that comes of it. Its waits on the fleet are of the chain w.
func (fl *fleetLink) carry(_ context.Context, a *agent, fx *fleetNext, w *replica.Chain) {
	l := fl.l
	if fx.taken {
		l.props.note(a.id, fx.props)
	}
	fl.orphanLanded(a, fx.landed)
	fl.logEvents(fx.logged)
	if fx.lost {
		l.log.Warn("selfimprove: the fleet lost the agent's state; writing it again", "agent", a.id)
	}
	if fx.kick {
		fl.Kick()
	}
	asked := fl.next(a, fx.next, fx.why, w)
	if fx.then != nil {
		fx.then.asked = asked
		fl.give(a, fx.then, w)
	}
	if fx.notice {
		fl.refresh(a)
	}
}
