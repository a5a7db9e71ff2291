package selfimprove

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
		t.moveTo(gen)
	}
	side := &t.change
	if control {
		side = &t.control
	}
	side.addQuality(quality{score: score, scored: true}, false)
	t.calls++ // a score waits to be sent, as a call does
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
