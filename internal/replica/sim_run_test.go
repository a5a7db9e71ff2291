package replica

import (
	"slices"
)

// sync ends a run: every message delivered without fault, then each
// replica refreshes and rewrites until all are at the fleet's revision
// and owe nothing.
func (s *sim) sync() {
	for round := 0; round < 20; round++ {
		for len(s.net) > 0 || s.pending() {
			for i, r := range s.rs {
				for len(r.sending) > 0 {
					s.send(r.sending[0])
				}
				for len(r.later) > 0 {
					s.takeLater(i, 0)
				}
			}
			if len(s.net) > 0 {
				s.deliver(0, false)
			}
		}
		quiet := true
		for i, r := range s.rs {
			if r.locked == nil && (r.st.Rev != s.f.rev || r.st.Owed() || r.decided != nil) {
				quiet = false
				if r.decided != nil || r.st.Rewrite() {
					s.save(i, false, false)
				} else {
					r.polling = true
					s.net = append(s.net, &msg{kind: mLoad, r: i, since: s.rs[i].st.Rev})
				}
			}
		}
		if quiet && len(s.net) == 0 {
			return
		}
	}
	s.fail("no sync after 20 rounds")
}

// pending reports whether a save was begun and not sent.
func (s *sim) pending() bool {
	for _, r := range s.rs {
		if len(r.sending) > 0 || len(r.later) > 0 {
			return true
		}
	}
	return false
}

// check checks the invariants once synced.
func (s *sim) check() {
	if s.err != nil {
		return
	}
	fleet, ok := decode(s.f.val)
	if !ok || s.f.rev == 0 || s.f.invalid {
		fleet = nil
	}
	for i, r := range s.rs {
		if !slices.Equal(r.copy, fleet) {
			s.fail("r%d's copy %v, the fleet's %v (rev %d): not in step once synced", i, r.copy, fleet, s.f.rev)
		}
	}
	if s.sc.loseState == 0 && s.sc.corrupt == 0 && s.sc.badKey == 0 {
		for id := range s.made {
			if !slices.Contains(fleet, id) {
				s.fail("decision %s reported made is in force nowhere (a lost update); the fleet holds %v", id, fleet)
			}
		}
	}
	for _, id := range fleet {
		// A third party's write or data loss can wipe a decision that
		// landed, reported failed as its answer was lost, before its
		// replica saw it in force; another replica's copy may still hold
		// it, and write it back over the invalid or lost state: then it
		// is in force, its event not recorded. Only that is let be.
		wiped := s.failedLanded[id] && s.sc.corrupt+s.sc.badKey+s.sc.loseState > 0
		if s.failed[id] && !s.recorded[id] && !wiped {
			s.fail("decision %s reported failed is in force (a ghost); the fleet holds %v", id, fleet)
		}
		if !s.made[id] && !s.failed[id] {
			s.fail("decision %s in force, never reported", id)
		}
	}
	for id := range s.recorded {
		if !s.landedOnce[id] {
			s.fail("decision %s recorded as landed, never in the fleet's state", id)
		}
		if s.made[id] {
			s.fail("decision %s reported made and recorded again as landed", id)
		}
	}
}

// run runs sc along choices (an index into the enabled steps at each
// branch point; past its end, the first step); it returns the number of
// steps enabled at each branch point, and the run's trace and error.
func run(sc script, choices []int) (widths []int, trace []string, err error) {
	return runWith(sc, choices, false)
}

// runPick is run whose choices are taken modulo the steps enabled.
func runPick(sc script, choices []int) (trace []string, err error) {
	_, trace, err = runWith(sc, choices, true)
	return trace, err
}

// steps runs the steps enabled, one at each branch point, along choices
// (past its end, the first; with mod, a choice is taken modulo the steps
// enabled), for 200 steps at most or until stop; it returns the steps
// enabled at each branch point and the trace.
func steps(enabled func() []step, choices []int, mod bool, stop func() bool) (widths []int, trace []string) {
	for k := 0; k < 200 && !stop(); k++ {
		st := enabled()
		if len(st) == 0 {
			break
		}
		c := 0
		if k < len(choices) {
			c = choices[k]
			if mod {
				c %= len(st)
			}
		}
		widths = append(widths, len(st))
		trace = append(trace, st[c].name)
		st[c].do()
	}
	return widths, trace
}

func runWith(sc script, choices []int, mod bool) (widths []int, trace []string, err error) {
	s := newSim(sc)
	widths, trace = steps(s.enabled, choices, mod, func() bool { return s.err != nil })
	if s.err != nil {
		return widths, trace, s.err
	}
	s.sync()
	s.check()
	return widths, trace, s.err
}

// explore runs every interleaving of sc (depth-first over the choices),
// up to max runs; it returns how many ran, and the first failure's trace
// and error. all reports that every interleaving ran.
func explore(sc script, max int) (runs int, all bool, trace []string, err error) {
	return dfs(max, func(choices []int) ([]int, []string, error) { return run(sc, choices) })
}

// dfs runs every sequence of choices of runner, depth-first, up to max
// runs; runner returns how many steps were enabled at each branch point.
func dfs(max int, runner func(choices []int) (widths []int, trace []string, err error)) (runs int, all bool, trace []string, err error) {
	var choices []int
	for runs < max {
		widths, tr, err := runner(choices)
		runs++
		if err != nil {
			return runs, false, tr, err
		}
		full := make([]int, len(widths))
		copy(full, choices)
		k := len(full) - 1
		for k >= 0 && full[k]+1 >= widths[k] {
			k--
		}
		if k < 0 {
			return runs, true, nil, nil
		}
		choices = append(full[:k:k], full[k]+1)
	}
	return runs, false, nil, nil
}

// sample runs n interleavings of sc chosen by a seeded generator.
func sample(sc script, n int, seed uint64) (runs int, trace []string, err error) {
	x := seed | 1
	for runs < n {
		var choices []int
		for range 200 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			choices = append(choices, int(x>>33))
		}
		// run clamps each choice to the steps enabled (see pick).
		tr, err := runPick(sc, choices)
		runs++
		if err != nil {
			return runs, tr, err
		}
	}
	return runs, nil, nil
}
