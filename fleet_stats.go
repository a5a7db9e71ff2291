package selfimprove

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// The statistics of an agent in the fleet: each replica that runs an
// agent sends its call statistics with its deltas (FleetDelta.Stats), at
// most once every fleetStatsEvery, and the fleet keeps the last ones. A
// replica's statistics hold the fleet's calls (the other replicas' come
// back with the pooled counts, agentState.replay), so the last ones sent
// are the fleet's, as of one flush ago. A replica that has not loaded
// the agent reads them (LoadStats) for the getters that report calls.

const (
	// maxFleetStats bounds the statistics a replica sends: a larger
	// encoding (not met in practice: a busy agent's is about 8 KiB) is
	// not sent.
	maxFleetStats = 256 << 10
	// fleetStatsEvery is how often at most a replica sends an agent's
	// statistics.
	fleetStatsEvery = 2 * time.Second
)

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
// s, in place of its own.
func (s *agentState) takeStats(t *agentState) {
	s.Tracker, s.Clusters = t.Tracker, t.Clusters
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

// fleetStats adds the statistics of the items' agents that are due (see
// FleetDelta.Stats) to their deltas: those with calls or scores of this
// replica's since it last sent them, at least fleetStatsEvery ago (the
// last calls of a burst go with the agent's next delta, a poll's at the
// latest), and statistics that changed. A delta sent again keeps its
// own.
// They are copied under each agent's lock and encoded outside it.
func (l *Loop) fleetStats(items []fleetItem) {
	now := l.clock.Now().UnixNano()
	for i := range items {
		it := &items[i]
		d := &it.d
		if d.Stats != nil {
			continue // sent again as it was
		}
		a, fa := it.a, it.a.fl
		a.mu.Lock()
		fa.statsOwed = fa.statsOwed || d.Change.Calls+d.Control.Calls+d.Change.Scored+d.Control.Scored > 0
		mark := a.s.statsMark()
		due := fa.statsOwed && !a.evicted && mark != fa.statsMark &&
			(fa.statsAt == 0 || now-fa.statsAt >= int64(fleetStatsEvery) || now < fa.statsAt)
		var st agentState
		if due {
			fa.statsAt, fa.statsMark, fa.statsOwed = now, mark, false
			st = a.s.statsPart()
		}
		a.mu.Unlock()
		if !due {
			continue
		}
		if b, err := encodeState(&st); err == nil && len(b) <= maxFleetStats {
			it.d.Stats = b
		}
	}
}

// errFleetStatsSize: the fleet's statistics of an agent are larger than
// a replica sends.
var errFleetStatsSize = errors.New("selfimprove: fleet: an agent's statistics over 256 KiB")

// fleetViewStats puts the fleet's statistics of agent id, which this
// replica has not loaded, in st, as an operation of the chain w. A value
// the fleet holds that is invalid is reported (at most once a minute)
// and left out: st keeps this replica's own statistics.
func (l *Loop) fleetViewStats(id string, st *agentState, w *fleetWait) {
	ctx, done, ok := l.fleet.op(w)
	if !ok {
		return // the Load took the chain's time: the fleet is slow
	}
	b, err := l.fleet.f.LoadStats(ctx, id)
	err = cut(ctx, err)
	done()
	if err == nil && b != nil {
		var t agentState
		if len(b) > maxFleetStats {
			err = errFleetStatsSize
		} else if t, err = decodeState(b, id); err == nil {
			st.takeStats(&t)
			return
		}
		err = fmt.Errorf("selfimprove: fleet: the statistics of agent %q: %w", id, err)
	}
	if err != nil {
		l.fleetErr(nil, err)
	}
}
