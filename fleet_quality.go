package selfimprove

import "time"

// Scores and costs in a fleet (docs/fleet.md): each replica sends the
// scores and costs of its calls, and those given later by Loop.Score,
// with its counts, in the arm of the generation they belong to (the
// config in force, or the config before it under verification), and
// books the other replicas' into the records of the same config
// versions. So the quality and cost rules, and the watch of the mean
// score, see the fleet's scores, each booked once: a replica's own as it
// makes them, the others' as the pooled arms bring them.

// score books, for the fleet, a score given later to a call of
// generation gen on the arm control or not.
func (t *fleetTally) score(gen uint64, control bool, score float64) {
	if gen != t.gen {
		if gen < t.gen {
			return
		}
		*t = fleetTally{gen: gen, fails: t.fails[:0]}
	}
	side := &t.change
	if control {
		side = &t.control
	}
	side.addQuality(quality{score: score, scored: true}, false)
	t.calls++ // a score waits to be sent, as a call does
}

// fleetScored books, for the fleet, a score given by Loop.Score to a call
// of version: in the arm of the generation in force that ran version, if
// one did (the score of an older config stays with this replica). a's
// lock is held.
func (l *Loop) fleetScored(a *agent, version int, score float64) {
	if a.fl == nil {
		return
	}
	switch {
	case version == a.s.Config.Version:
		a.fl.tally.score(a.s.Gen, false, score)
	case a.s.Verifying != nil && version == a.s.Verifying.From.Version:
		a.fl.tally.score(a.s.Gen, true, score)
	default:
		return
	}
	if a.fl.tally.calls == l.fleet.calls {
		l.fleetKick()
	}
}

// bookArms books this replica's delta d in fa's arms, and returns the
// other replicas' scores and costs of the arms (change, control) of the
// pool p that fa had not booked. The agent's mu is held.
func (fa *fleetAgent) bookArms(d *FleetDelta, p *FleetPool) (fresh [2]FleetCounts) {
	ar := &fa.arms
	restart := !ar.started && ar.stored && d.Gen == ar.storedGen
	if d.Gen != ar.gen || !ar.started {
		if d.Gen < ar.gen {
			return fresh
		}
		*ar = fleetArms{gen: d.Gen, started: true}
	}
	mine := [2]FleetCounts{d.Change, d.Control}
	pooled := [2]FleetCounts{p.Change, p.Control}
	for i := range ar.sent {
		ar.sent[i].Add(mine[i])
		others := pooled[i].sub(ar.sent[i])
		if restart || others.negative() {
			// The fleet's counts of the generation started again, or it
			// counts a later one: from this delta on.
			ar.sent[i] = mine[i]
			if others = pooled[i].sub(ar.sent[i]); others.negative() {
				others = FleetCounts{}
			}
			ar.seen[i] = others
			continue
		}
		if f := others.sub(ar.seen[i]); !f.negative() {
			fresh[i] = f
		}
		ar.seen[i] = others
	}
	return fresh
}

// bookPooled books the other replicas' scores and costs fresh (change,
// control) of generation gen in the records of the versions that ran
// them, and feeds the scores of the config in force to the watch.
func (s *agentState) bookPooled(gen uint64, fresh [2]FleetCounts, now time.Time, r *ruleBook, eff *effects) {
	if gen != s.Gen {
		return // the versions of an older generation are not known here
	}
	for i, f := range fresh {
		q := f.quality()
		if q.Scored <= 0 {
			q.Scored, q.Sum, q.Squares = 0, 0, 0
		}
		if q.Costed <= 0 {
			q.Costed, q.CostOK, q.Cost = 0, 0, 0
		}
		if q.Scored == 0 && q.Costed == 0 {
			continue
		}
		c := &s.Config
		if i == 1 {
			if s.Verifying == nil {
				continue
			}
			c = &s.Verifying.From
		}
		rec := s.recordOf(c.Version, c.Route)
		rec.Scored += q.Scored
		rec.Sum += max(q.Sum, 0)
		rec.Squares += max(q.Squares, 0)
		rec.Costed += q.Costed
		rec.CostOK += q.CostOK
		rec.Cost += max(q.Cost, 0)
		if i == 0 && q.Scored > 0 {
			s.watchScores(c.Version, q.Scored, max(q.Sum, 0), max(q.Squares, 0), now, false, r, eff)
		}
	}
}

// fleetPooledQuality books the other replicas' scores and costs that the
// pool p, answering a's delta d, brought (see bookArms, bookPooled).
// a's lock is held.
func (l *Loop) fleetPooledQuality(a *agent, d *FleetDelta, p *FleetPool, now time.Time, eff *effects) {
	if q := a.fl.bookArms(d, p); q[0].Scored|q[0].Costed|q[1].Scored|q[1].Costed != 0 {
		a.s.bookPooled(p.Gen, q, now, &l.rules, eff)
		a.dirty = true
	}
}
