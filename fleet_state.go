package selfimprove

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The fleet's side of the per-agent state machine: what of an agentState
// a fleet shares, how a replica takes the fleet's state, and how the
// calls of other replicas are booked. Pure, like state.go: no IO, no
// clock, no lock.

// sharedPart returns s without what stays with each replica: the call
// statistics (tracker, clusters), the verification counts, and the
// scores and costs per version with the watch of the mean score but for
// the fall a change answers (Watch.Ref): the fleet pools the scores
// separately (fleet_quality.go), and each replica watches them; the
// lease makes one of those the watch fires on run the strategy. It is the value a Fleet
// stores, in the state file format.
func (s *agentState) sharedPart() agentState {
	sh := s.snapshot()
	sh.Tracker = tracker{Win: window{Width: slotWidth(profiles[len(profiles)-1].threshold.Window)}}
	sh.Clusters = nil
	sh.Verify, sh.Control, sh.Streak = counts{}, counts{}, streak{}
	sh.analyzing, sh.early, sh.leftOpen = false, false, 0
	if q := sh.Quality; q != nil {
		w := q.Watch
		q.Recs, q.Answered = nil, nil
		q.Watch = qualityWatch{Ref: w.Ref, RefFor: w.RefFor}
	}
	return sh
}

// ownQuality puts s's own scores and costs per version, and its watch
// (but for Ref), into b (the quality book of a state taken from the
// fleet, which holds neither): see sharedPart.
func (s *agentState) ownQuality(b **qualityBook) {
	own := s.Quality
	if own == nil {
		return
	}
	if *b == nil {
		*b = new(qualityBook)
	}
	q := *b
	q.Recs, q.Keys, q.Answered = own.Recs, own.Keys, own.Answered
	w := own.Watch
	w.Ref, w.RefFor = q.Watch.Ref, q.Watch.RefFor
	q.Watch = w
}

// encodeShared encodes s's shared part.
func encodeShared(s *agentState) ([]byte, error) {
	sh := s.sharedPart()
	return encodeState(&sh)
}

// adopt takes the shared part of sh (decoded from the fleet), keeping s's
// own call statistics, its scores and costs per version, and its verification counts while the same change
// is verified under the same generation.
func (s *agentState) adopt(sh *agentState) {
	keep := s.Verifying != nil && sh.Verifying != nil && s.Verifying.ID == sh.Verifying.ID && s.Gen == sh.Gen
	tr, cl, an, early, open := s.Tracker, s.Clusters, s.analyzing, s.early, s.leftOpen
	v, c, k := s.Verify, s.Control, s.Streak
	next := sh.snapshot()
	s.ownQuality(&next.Quality)
	*s = next
	s.Tracker, s.Clusters, s.analyzing, s.early, s.leftOpen = tr, cl, an, early, open
	s.Verify, s.Control, s.Streak = counts{}, counts{}, streak{}
	if keep {
		s.Verify, s.Control, s.Streak = v, c, k
	}
}

// pool sets the verification counts to those of the fleet (which include
// this replica's calls sent so far) plus this replica's calls not sent
// yet; the run of consecutive failures is the fleet's, or this replica's
// when it is longer.
func (s *agentState) pool(change, control, unsent, unsentControl FleetCounts) {
	set := func(c *counts, p FleetCounts) {
		c.Calls, c.Failures = int(p.Calls), int(p.Failures)
		c.Latency, c.OKLatency = p.LatencyNS, p.SuccessLatencyNS
		c.Consec = max(c.Consec, int32(min(p.Consecutive, math.MaxInt32)))
	}
	change.Add(unsent)
	control.Add(unsentControl)
	set(&s.Verify, change)
	set(&s.Control, control)
}

// replay books calls of other replicas: ok successes that took
// okLatency in all, ending at end; lost failures that took lostLatency,
// counted but not told of one by one (beyond the MaxFleetFailures the
// fleet keeps), ending at end; and the failures fails (each under its
// generation), so that the trigger and the stats see the fleet's calls.
func (s *agentState) replay(end int64, ok, okLatency, lost, lostLatency int64, fails []FleetFailure) {
	t := &s.Tracker
	if n := ok + lost; n > 0 {
		t.Total += n
		t.Day.addN(end, uint64(n))
		sl := t.Win.at(end)
		sl.Calls = uint32(min(int64(sl.Calls)+n, math.MaxUint32))
		sl.Failures = uint32(min(int64(sl.Failures)+lost, math.MaxUint32))
		sl.Latency += okLatency + lostLatency
	}
	for i := range fails {
		f := &fails[i]
		var buf [4 * failure.MaxSignature]byte
		sig := failure.AppendSignature(buf[:0], f.Text)
		cl := failure.ClusterOf(sig)
		s.Tracker.record(f.Gen, f.EndNS, time.Duration(f.DurationNS), true, f.Version, f.Text, uint32(cl))
		s.observeCluster(cl, sig, f.Class, f.Text, f.EndNS)
	}
}

// fleetTally is what a replica counted of one agent's calls since it last
// sent them to the fleet; guarded by the agent's mutex.
type fleetTally struct {
	gen             uint64
	change, control FleetCounts
	fails           []FleetFailure
	calls           int64
	// prior holds the calls of other generations than the agent's (an
	// earlier one, or one a take-back undid) not sent yet, and priorFails
	// their failures (each with its generation): sent as a delta of their
	// own before the current counts, at generation 0, which no change is
	// verified under, they count in the fleet's totals (what every
	// replica's trigger and statistics see), never in a verification.
	// Their scores stay with this replica.
	prior      FleetCounts
	priorFails []FleetFailure
}

// follow makes gen, the agent's generation, t's: the counts t holds of
// another wait in prior (a tally kept at an eviction, fleetMark, given
// to an agent whose generation the fleet moved on meanwhile).
func (t *fleetTally) follow(gen uint64) {
	if t.gen != gen {
		t.moveTo(gen)
	}
}

// moveTo starts the counts of generation gen, the agent's: those of t's
// generation wait in prior.
func (t *fleetTally) moveTo(gen uint64) {
	t.keep(t.change)
	t.keep(t.control)
	n := min(len(t.fails), MaxFleetFailures-len(t.priorFails))
	t.priorFails = append(t.priorFails, t.fails[:max(n, 0)]...)
	t.gen, t.change, t.control, t.fails = gen, FleetCounts{}, FleetCounts{}, t.fails[:0]
}

// keep books c, calls of another generation than the agent's, in prior:
// their counts without their scores.
func (t *fleetTally) keep(c FleetCounts) {
	if c.Calls == 0 {
		return
	}
	t.prior.Add(FleetCounts{Calls: c.Calls, Failures: c.Failures, LatencyNS: c.LatencyNS, SuccessLatencyNS: c.SuccessLatencyNS})
}

// hasPrior reports whether calls of earlier generations wait to be sent.
func (t *fleetTally) hasPrior() bool { return t.prior.Calls > 0 }

// takePrior returns the delta of the calls of earlier generations, and
// leaves the current ones.
func (t *fleetTally) takePrior(id, replica string) FleetDelta {
	d := FleetDelta{AgentID: id, Replica: replica, Gen: 0, Change: t.prior, Failures: t.priorFails}
	t.calls = max(t.calls-t.prior.Calls, 0)
	t.prior, t.priorFails = FleetCounts{}, nil
	return d
}

// successes books n successful calls of generation gen that took lat
// nanoseconds in all: calls booked without the agent's lock, settled.
func (t *fleetTally) successes(gen uint64, n, lat int64) {
	if gen != t.gen {
		t.moveTo(gen)
	}
	t.change.Calls += n
	t.change.LatencyNS += lat
	t.change.SuccessLatencyNS += lat
	t.change.Consecutive = 0
	t.calls += n
}

// count books one finished call, c, of the agent at generation gen: a
// call that started under another generation counts in the totals only.
func (t *fleetTally) count(c *call, gen uint64) {
	if t.gen != gen {
		t.moveTo(gen)
	}
	if c.gen != gen {
		f := FleetCounts{Calls: 1, LatencyNS: int64(c.dur)}
		if c.failed {
			f.Failures = 1
			if len(t.priorFails) < MaxFleetFailures {
				t.priorFails = append(t.priorFails, c.fleetFailure())
			}
		} else {
			f.SuccessLatencyNS = int64(c.dur)
		}
		t.keep(f)
		t.calls++
		return
	}
	side := &t.change
	if c.arm == ArmControl {
		side = &t.control
	}
	side.Calls++
	side.LatencyNS += int64(c.dur)
	if c.q.any() {
		side.addQuality(c.q, c.failed)
	}
	if c.failed {
		side.Failures++
		side.Consecutive++
		if len(t.fails) < MaxFleetFailures {
			t.fails = append(t.fails, c.fleetFailure())
		}
	} else {
		side.SuccessLatencyNS += int64(c.dur)
		side.Consecutive = 0
	}
	t.calls++
}

// fleetFailure is c, a failed call, as the fleet's pool keeps it.
func (c *call) fleetFailure() FleetFailure {
	return FleetFailure{Gen: c.gen, EndNS: c.end.UnixNano(), DurationNS: int64(c.dur), Version: c.version, Class: c.class, Text: c.text}
}

// fleetAgent is an agent's link to the fleet. The fields without their
// own synchronisation are guarded by the agent's mutex.
type fleetAgent struct {
	// st is the agent's replication: its revision and base, the commit
	// in flight, what is owed to the fleet, the orphan decision.
	st    replica.State
	tally fleetTally
	// sent is this replica's calls the fleet has; others, the other
	// replicas' calls booked here; seq, the newest failure booked.
	// rebase: the next pool is where the count of the fleet's calls
	// starts (book), not calls to book: the agent came from the store
	// with calls, whose statistics hold the fleet's calls it had booked,
	// or the last pool was refused (out of the state's range).
	sent, others FleetCounts
	seq          uint64
	rebase       bool
	leaseBusy    int64        // Unix ns: another replica holds the lease until then
	judging      atomic.Bool  // a call under verification is sending the agent's counts (fleetLink.judge)
	badAt        atomic.Int64 // Unix ns: the last report of the agent's invalid data in the fleet
	// deltas numbers the deltas sent (FleetDelta.Batch), and keeps the
	// one whose answer was lost, sent again unchanged before any other.
	deltas replica.Deltas[FleetDelta]
	// pendingPrior: the delta deltas keeps holds calls of other
	// generations (fleetTally.prior). flying: a delta was taken whose
	// pool is not booked yet (markLocked).
	pendingPrior, flying bool
	// arms is what was sent and booked of the generation's arms: the
	// scores and costs (fleet_quality.go).
	arms fleetArms
	// decided is the batch of the decisions made on the agent's copy
	// since a save last took it (fleet_batch.go). Guarded by the agent's
	// mu.
	decided *fleetBatch
	// releasing is set while the flusher gives the agent's lease back
	// (fleetLink.releases). Guarded by the agent's mu.
	releasing bool
	// statsAt is when the agent's statistics were last sent (Unix ns),
	// statsMark their statsMark then; statsOwed: calls of this
	// replica's were sent since, or other replicas' booked
	// (fleet_stats.go). Guarded by the agent's mu.
	statsAt, statsMark int64
	statsOwed          bool
}

// fleetArms is what a replica has sent and booked of the arms of the
// generation gen; guarded by the agent's mutex.
type fleetArms struct {
	gen uint64
	// sent is this replica's counts of the arms (change, control) the
	// fleet has; seen, the other replicas' it has booked.
	sent, seen [2]FleetCounts
	// started says a pool was booked. stored says the agent's records
	// came from the store, under generation storedGen: when the first
	// pool is of it, what the fleet had counted of it before is not
	// booked, since the records may hold it already (this replica's
	// scores before a restart, and those it had booked of the others).
	started, stored bool
	storedGen       uint64
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
		// Sums out of range (another replica's records, which Redis holds:
		// a cost of 1e308 each adds up to +Inf here) are not booked, so
		// that the state stays finite and saves.
		if q.Scored <= 0 || !(q.Sum <= float64(q.Scored)*(1+1e-9) && q.Squares <= float64(q.Scored)*(1+1e-9)) {
			q.Scored, q.Sum, q.Squares = 0, 0, 0
		}
		if q.Costed <= 0 || !(q.Cost <= maxRecordCost*float64(q.Costed)) {
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

// statsPart returns a copy of s's call statistics, as an agent state
// that can be encoded: its analysis window and call counters, failure
// clusters, and scores and costs per version, with its config's version
// (the rest of the config is the shared state's).
func (s *agentState) statsPart() agentState {
	st := agentState{
		AgentID: s.AgentID, Config: Config{Version: s.Config.Version}, MaxVersion: s.MaxVersion, Gen: s.Gen,
		Tracker: s.Tracker, Clusters: slices.Clone(s.Clusters),
	}
	if o := s.Tracker.Outages; o != nil {
		c := *o
		st.Tracker.Outages = &c
	}
	if q := s.Quality; q != nil && len(q.Recs) > 0 {
		st.Quality = &qualityBook{Recs: slices.Clone(q.Recs)}
	}
	return st
}

// takeStats puts the call statistics of t (decoded from the fleet's) in
// s, in place of its own, but for its count of ignored calls: the fleet
// keeps no count of them, and t's are those of the replica that sent it.
func (s *agentState) takeStats(t *agentState) {
	ignored := s.Tracker.Ignored
	s.Tracker, s.Clusters = t.Tracker, t.Clusters
	s.Tracker.Ignored = ignored
	var recs []qualityRec
	if t.Quality != nil {
		recs = t.Quality.Recs
	}
	switch {
	case s.Quality != nil:
		s.Quality.Recs = recs
	case recs != nil:
		s.Quality = &qualityBook{Recs: recs}
	}
}

// statsMark changes when s's call statistics change: its calls, and its
// scores and costs.
func (s *agentState) statsMark() int64 {
	m := s.Tracker.Total + s.Tracker.Ignored
	if q := s.Quality; q != nil {
		for i := range q.Recs {
			m += q.Recs[i].Scored + q.Recs[i].Costed
		}
	}
	return m
}

// fixesOf returns the outcomes of the decided changes in chs that known
// does not hold in the same state, for the failure memory.
func fixesOf(chs []Change, known map[string]ChangeState) []fixNote {
	var out []fixNote
	for i := range chs {
		if ch := &chs[i]; known[ch.ID] != ch.State {
			if f, ok := fixNoteOf(ch, FixOutcome(ch.State), ch.DecidedAt); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

// decidedIn returns the state of each decided change in base, the
// fleet's state of agent id the replica took last: the failure memory
// learned those when it was taken, or when this replica's commit of it
// landed. Not the copy's own list: it may hold decisions of this
// replica's not committed yet, which the memory learns only once they
// land; when a newer state of another replica's takes them back, the
// same decision made there is new to the memory (TestFleetMemoryOfRacedRollback).
func decidedIn(base []byte, id string) map[string]ChangeState {
	sh, err := decodeState(base, id)
	if err != nil || len(sh.Changes) == 0 {
		return nil
	}
	out := make(map[string]ChangeState, len(sh.Changes))
	for _, ch := range sh.Changes {
		out[ch.ID] = ch.State
	}
	return out
}

// behind returns how many revisions the copy is behind the fleet's
// revision rev, which a pool brought (0: in step; 1 when it had none and
// the fleet has one), and whether rev is another than the copy's; when
// it is not, the copy is in step (replica.State.Synced). The agent's mu
// is held.
func (fa *fleetAgent) behind(rev uint64) (lag int64, newer bool) {
	own := fa.st.Rev
	switch {
	case rev <= own:
	case own == 0:
		lag = 1 // the fleet's first state of the agent: one commit at least
	default:
		lag = int64(min(rev-own, 1<<53))
	}
	if rev == own {
		fa.st.Synced()
	}
	return lag, rev != own
}

// fleetStatsEvery is how often at most a replica sends an agent's
// statistics (fleet_stats.go).
const fleetStatsEvery = 2 * time.Second
