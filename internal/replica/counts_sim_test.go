package replica

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// The counts simulator: replicas that count calls of one agent and send
// them as numbered deltas (Deltas), a fleet that books a replica's number
// once, and the messages between them; a delta can be lost before the
// fleet books it or after (its answer lost). Once the runs end and every
// replica has flushed without faults, the pooled calls must equal the
// calls made.

type delta struct {
	batch uint64
	calls int
}

type countsScript struct {
	replicas int
	calls    []int // calls each replica makes
	flushes  int   // flushes in all, beyond the final ones
	drop     int   // deltas lost before the fleet books them
	loseAns  int   // answers lost after the fleet booked the delta
}

type countsSim struct {
	sc       countsScript
	budget   countsScript
	tally    []int
	made     []int
	q        []Deltas[delta]
	seq      []atomic.Uint64 // each replica's numbering (Deltas.Next)
	inflight []bool
	net      []countsMsg
	booked   map[int]uint64 // each replica's latest number booked
	total    int
}

type countsMsg struct {
	r      int
	d      delta
	answer bool
	lost   bool
}

func (s *countsSim) enabled() []step {
	var out []step
	for i := range s.sc.replicas {
		if s.made[i] < s.sc.calls[i] {
			out = append(out, step{fmt.Sprintf("call r%d", i), func() { s.made[i]++; s.tally[i]++ }})
		}
		if s.budget.flushes > 0 && !s.inflight[i] {
			out = append(out, step{fmt.Sprintf("flush r%d", i), func() { s.budget.flushes--; s.flush(i) }})
		}
	}
	for k, m := range s.net {
		out = append(out, step{fmt.Sprintf("deliver %+v", m), func() { s.deliver(k, false) }})
		if !m.answer && s.budget.drop > 0 || m.answer && !m.lost && s.budget.loseAns > 0 {
			out = append(out, step{fmt.Sprintf("fault %+v", m), func() { s.deliver(k, true) }})
		}
	}
	return out
}

// flush is the root's fleetLink.itemOf and fleetLink.send sending: the pending delta again,
// or a new one of the tally.
func (s *countsSim) flush(i int) {
	var d delta
	if p := s.q[i].Pending(); p != nil {
		d = *p
	} else if s.tally[i] > 0 {
		d = delta{batch: s.q[i].Next(&s.seq[i]), calls: s.tally[i]}
		s.tally[i] = 0
	} else {
		return
	}
	s.inflight[i] = true
	s.net = append(s.net, countsMsg{r: i, d: d})
}

func (s *countsSim) deliver(k int, fault bool) {
	m := s.net[k]
	s.net = slices.Delete(s.net, k, k+1)
	if m.answer {
		lost := m.lost
		if fault {
			s.budget.loseAns--
			lost = true
		}
		s.q[m.r].Answered(m.d, lost)
		s.inflight[m.r] = false
		return
	}
	if fault {
		s.budget.drop--
		s.net = append(s.net, countsMsg{r: m.r, d: m.d, answer: true, lost: true})
		return
	}
	if m.d.batch > s.booked[m.r] {
		s.booked[m.r] = m.d.batch
		s.total += m.d.calls
	}
	s.net = append(s.net, countsMsg{r: m.r, d: m.d, answer: true})
}

func runCounts(sc countsScript, choices []int) (widths []int, trace []string, err error) {
	s := &countsSim{sc: sc, budget: sc, tally: make([]int, sc.replicas), made: make([]int, sc.replicas),
		q: make([]Deltas[delta], sc.replicas), seq: make([]atomic.Uint64, sc.replicas), inflight: make([]bool, sc.replicas), booked: map[int]uint64{}}
	widths, trace = steps(s.enabled, choices, false, func() bool { return false })
	// Sync: flush every replica until nothing is owed.
	for range 10 {
		for i := range sc.replicas {
			if !s.inflight[i] {
				s.flush(i)
			}
		}
		for len(s.net) > 0 {
			s.deliver(0, false)
		}
	}
	calls := 0
	for _, n := range s.made {
		calls += n
	}
	if s.total != calls {
		return widths, trace, fmt.Errorf("the fleet pooled %d calls, %d were made", s.total, calls)
	}
	return widths, trace, nil
}
