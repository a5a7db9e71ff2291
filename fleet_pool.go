package selfimprove

import (
	"context"
	"math"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// pooled takes the pooled counts p that answered a's delta it.d; rep,
// when set, gets the decision they make.
// It returns how many revisions a's copy was behind the fleet's (0: in
// step; 1 when it had none and the fleet has one). in holds its
// bookkeeping input (fleetLink.book).
func (fl *fleetLink) pooled(a *agent, it *fleetItem, p *FleetPool, rep *Report, w *replica.Chain, in *fleetInput) (lag int64) {
	l := fl.l
	if fl.book(a, in, fleetInput{kind: fleetPoolRev, rev: p.Rev}); in.ok {
		fl.refreshWait(a, w) // the fleet's state is another: take it
	}
	lag = in.lag
	bad := !p.Total.fits() || !p.Change.fits() || !p.Control.fits()
	if bad {
		fl.bad(a, errFleetPoolRange)
	}
	pin := input{kind: inPooled, lock: lockLive, more: &inputMore{d: &it.d, p: p, prior: it.prior, bad: bad}}
	if rep == nil {
		rep = new(Report)
	}
	l.step(context.Background(), a, a.id, &pin, rep, waits{w})
	return lag
}

// applyPooled applies to a the pooled counts of in: the other replicas'
// calls, scores and failures it had not seen, and the change under
// verification judged on every replica's calls. a.mu is held.
func (a *agent) applyPooled(l *Loop, in *input, eff *effects) {
	fa, x, now := a.fl, in.more, time.Unix(0, in.now)
	d, p := x.d, x.p
	fa.flying = false // the delta's pool: booked, or refused and the count started again
	if x.bad {
		// Counts beyond what the state holds (planted in the fleet):
		// booked nowhere, and the next valid pool starts the count.
		fa.sent.Add(d.Change)
		fa.sent.Add(d.Control)
		fa.rebase = true
		return
	}
	stored := fa.rebase // the statistics hold the failures the pool lists
	fresh := fa.book(d, p)
	fa.owedStats(fresh)
	if !x.prior {
		a.pooledQualityLocked(l, d, p, now, eff)
	}
	for _, f := range p.Failures {
		if f.Seq > fa.seq {
			fa.seq = f.Seq
			if f.Replica != l.fleet.Name && !stored {
				x.fails = append(x.fails, f)
			}
		}
	}
	ok := fresh.Calls - fresh.Failures
	lost, lostLatency := fresh.Failures-int64(len(x.fails)), fresh.LatencyNS-fresh.SuccessLatencyNS
	for i := range x.fails {
		lostLatency -= x.fails[i].DurationNS
	}
	if lost = max(lost, 0); lost == 0 {
		lostLatency = 0
	}
	if ok > 0 || lost > 0 || len(x.fails) > 0 {
		a.s.replay(in.now, ok, fresh.SuccessLatencyNS, lost, max(lostLatency, 0), x.fails)
		// The run of failures is the fleet's, as the deltas arrived,
		// then this replica's calls not sent yet: the other replicas'
		// failures, booked after their successes, are no run of theirs.
		run := p.Total
		run.Add(fa.tally.prior)
		run.Add(fa.tally.change)
		run.Add(fa.tally.control)
		a.s.Tracker.Consec = int(min(run.Consecutive, math.MaxInt32))
		a.dirty = true
	}
	eff.window = a.s.Tracker.Win.Width * windowSlots
	if len(x.fails) > 0 {
		// Fixes attach to the clusters the failure memory knows.
		x.known = fixesOf(a.s.Changes, nil)
	}
	if a.s.Verifying != nil && p.Gen == a.s.Gen && !x.prior {
		var unsent, unsentControl FleetCounts
		if fa.tally.gen == p.Gen {
			unsent, unsentControl = fa.tally.change, fa.tally.control
		}
		a.s.pool(p.Change, p.Control, unsent, unsentControl)
		a.s.judge(now, &l.rules, eff)
	}
}

// tallyLocked books for the fleet, before the transition, what the
// input in adds to the counts of a's config in force: a call, or a
// score. It reports whether the counts not sent reached full calls, for
// a flush. a.mu is held.
func (a *agent) tallyLocked(in *input, full int64) bool {
	switch in.kind {
	case inCall:
		if in.c.ignored {
			return false
		}
		a.fl.tally.count(in.c, a.s.Gen)
	case inScore:
		version, _, ok := a.s.placeVersion(in.low)
		if !ok || a.s.Tracker.Total == 0 || a.s.scoreSeen(in.key) || !a.scoredLocked(version, in.score) {
			return false
		}
	default:
		return false
	}
	return a.fl.tally.calls == full
}

// book books this replica's delta d in fa, and returns the other
// replicas' calls in the pool p that fa had not seen. The agent's mu is
// held.
func (fa *fleetAgent) book(d *FleetDelta, p *FleetPool) FleetCounts {
	fa.sent.Add(d.Change)
	fa.sent.Add(d.Control)
	others := p.Total.sub(fa.sent)
	if others.negative() || fa.rebase {
		// The fleet's counts started again (lost, or set aside), or the
		// agent came from the store, whose statistics hold what the
		// fleet had brought it (evicted and loaded again without its
		// bookkeeping, fleet_pool.go, or the replica restarted): from
		// this delta on.
		fa.rebase = false
		fa.sent = FleetCounts{}
		fa.sent.Add(d.Change)
		fa.sent.Add(d.Control)
		others = p.Total.sub(fa.sent)
		fa.others = others
	}
	fresh := others.sub(fa.others)
	if fresh.negative() {
		fresh = FleetCounts{}
	}
	fa.others = others
	return fresh
}

// scoredLocked books, for the fleet, a score given by Loop.Score to a
// call of version: in the arm of the generation in force that ran
// version, if one did (the score of an older config stays with this
// replica), and reports whether it did. a's lock is held.
func (a *agent) scoredLocked(version int, score float64) bool {
	switch {
	case version == a.s.Config.Version:
		a.fl.tally.score(a.s.Gen, false, score)
	case a.s.Verifying != nil && version == a.s.Verifying.From.Version:
		a.fl.tally.score(a.s.Gen, true, score)
	default:
		return false
	}
	return true
}

// pooledQualityLocked books the other replicas' scores and costs that
// the pool p, answering a's delta d, brought (see bookArms, bookPooled).
// a's lock is held.
func (a *agent) pooledQualityLocked(l *Loop, d *FleetDelta, p *FleetPool, now time.Time, eff *effects) {
	if q := a.fl.bookArms(d, p); q[0].Scored|q[0].Costed|q[1].Scored|q[1].Costed != 0 {
		a.s.bookPooled(p.Gen, q, now, &l.rules, eff)
		a.dirty = true
	}
}

// What a replica keeps of an evicted agent's fleet bookkeeping. An agent
// evicted from memory (WithMaxAgents) is saved with the calls it had
// booked, its own and the other replicas'; loaded again, it books from
// its next pool the fleet's calls beyond those, the other replicas' calls
// made while it was out of memory among them (fleetAgent.book). Without
// the mark, the first pool after the load would only start the count
// again, and those calls would never be booked here.

// fleetMark is an evicted agent's fleet bookkeeping: this replica's
// calls the fleet has, the other replicas' it booked, and the newest
// failure it booked (fleetAgent's sent, others and seq), when booked; and
// the counts the fleet had not booked, when the agent was evicted anyway
// (evictOne's force: the fleet down, or the agents beyond the cap's
// slack): its calls and scores not sent (tally), and the delta to send
// again (pending; of earlier generations: pendingPrior), which its next
// load sends.
type fleetMark struct {
	sent, others FleetCounts
	seq          uint64
	booked       bool
	arms         fleetArms // what it had sent and booked of the scores and costs
	tally        fleetTally
	pending      *FleetDelta
	pendingPrior bool
}

// unsent is how many calls (and scores) of m the fleet has not booked.
func (m *fleetMark) unsent() int64 {
	n := m.tally.calls
	if d := m.pending; d != nil {
		n += d.Change.Calls + d.Control.Calls
	}
	return n
}

// unsentLocked reports whether fa holds counts the fleet has not booked:
// a delta in flight (taken by a flush, its pool not booked yet), or, but
// with force, calls or scores not sent, or a delta to send again. The
// agent's mu is held.
func (fa *fleetAgent) unsentLocked(force bool) bool {
	return fa.flying || !force && (fa.tally.calls > 0 || fa.deltas.Pending() != nil)
}

// markLocked returns fa's bookkeeping, for eviction, and whether it is
// worth keeping: it holds all that the agent's statistics hold of the
// fleet (booked: not when the next pool starts the count again anyway,
// rebase, nor with a delta taken whose pool is not booked, which the
// fleet may hold or not), or counts the fleet has not booked. The agent's
// mu is held.
func (fa *fleetAgent) markLocked() (fleetMark, bool) {
	m := fleetMark{sent: fa.sent, others: fa.others, seq: fa.seq, booked: !fa.rebase && !fa.flying, arms: fa.arms, tally: fa.tally}
	if d := fa.deltas.Pending(); d != nil {
		m.pending, m.pendingPrior = d, fa.pendingPrior
	}
	return m, m.booked || m.unsent() > 0
}

// park keeps m, the bookkeeping of agent id evicted, until it is loaded
// again (unpark): at most as many as the agents in memory, beyond which
// one kept goes (it then starts the count again at its load, as it would
// without; its counts not sent, if any, are lost, and logged).
func (fl *fleetLink) park(id string, m fleetMark) {
	fl.parkMu.Lock()
	defer fl.parkMu.Unlock()
	if fl.parked == nil {
		fl.parked = map[string]fleetMark{}
	}
	if _, ok := fl.parked[id]; !ok && len(fl.parked) >= fl.l.maxAgents {
		fl.dropOneLocked()
	}
	fl.parked[id] = m
}

// dropOneLocked drops one mark kept: one without counts not sent among
// the first few the map gives, if there is one; else one whose counts
// are lost, and logged. parkMu is held.
func (fl *fleetLink) dropOneLocked() {
	victim, n := "", 0
	for k, m := range fl.parked {
		if victim == "" || m.unsent() == 0 {
			victim = k
		}
		if n++; m.unsent() == 0 || n == 8 {
			break
		}
	}
	m := fl.parked[victim]
	delete(fl.parked, victim)
	fl.lost(victim, &m, "more agents evicted than WithMaxAgents keep")
}

// lost logs the counts of m, kept for agent id, that will never reach
// the fleet, for why.
func (fl *fleetLink) lost(id string, m *fleetMark, why string) {
	if n := m.unsent(); n > 0 {
		fl.l.log.Warn("selfimprove: calls of an evicted agent not sent to the fleet are lost: "+why, "agent", id, "calls", n)
	}
}

// unpark takes the bookkeeping kept at the eviction of agent id, if
// any: kept once only.
func (fl *fleetLink) unpark(id string) (fleetMark, bool) {
	fl.parkMu.Lock()
	defer fl.parkMu.Unlock()
	m, ok := fl.parked[id]
	delete(fl.parked, id)
	return m, ok
}

// unparkAll drops the bookkeeping kept of every agent evicted, at Close:
// its counts not sent are lost, and logged.
func (fl *fleetLink) unparkAll() {
	fl.parkMu.Lock()
	defer fl.parkMu.Unlock()
	for id, m := range fl.parked {
		fl.lost(id, &m, "the replica closed before its next load")
	}
	fl.parked = nil
}

// resume gives fa, the new link of an agent loaded from the store, m,
// the bookkeeping kept at its eviction: its counts the fleet had not
// booked, which the next flush sends, and, when fa would start the count
// again (its statistics hold calls) and m is booked, what it had booked,
// so that from its next pool it books the fleet's calls beyond those;
// and the same of the scores and costs of gen, the agent's generation
// (the arms, when m is booked and its arms are of gen). Called by attach
// only, before any call sees the agent.
func (fa *fleetAgent) resume(m fleetMark, gen uint64) {
	if fa.rebase && m.booked {
		fa.sent, fa.others, fa.seq, fa.rebase = m.sent, m.others, m.seq, false
	}
	if m.booked && m.arms.started && m.arms.gen == gen {
		fa.arms = m.arms
	}
	fa.tally = m.tally
	if m.pending != nil {
		fa.deltas.Keep(*m.pending)
		fa.pendingPrior = m.pendingPrior
	}
}
