package selfimprove

import (
	"errors"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The statistics of an agent in the fleet: each replica that runs an
// agent sends its call statistics with its deltas (FleetDelta.Stats), at
// most once every fleetStatsEvery, and the fleet keeps the last ones. A
// replica's statistics hold the fleet's calls (the other replicas' come
// back with the pooled counts, agentState.replay), so the last ones sent
// are the fleet's, as of one flush ago. A replica that has not loaded
// the agent reads them (LoadStats) for the getters that report calls.
// A flush adds them to the deltas it sends (fleetLink.stats, in
// fleet_loop.go, with the flush).

// maxFleetStats bounds the statistics a replica sends: a larger encoding
// (not met in practice: a busy agent's is about 8 KiB) is not sent.
const maxFleetStats = 256 << 10

// own reports whether d carries calls, scores or costs of the replica's.
func own(d *FleetDelta) bool {
	return d.Change.Calls+d.Control.Calls+d.Change.Scored+d.Control.Scored+d.Change.Costed+d.Control.Costed > 0
}

// owedStats notes, after the fleet brought other replicas' calls, scores
// or costs (fresh, failures among them) that a's statistics sent before
// lack, that they are to be sent again: the last statistics the fleet
// keeps may be these, short of those calls. The agent's mu is held.
func (fa *fleetAgent) owedStats(fresh FleetCounts) {
	if fa.statsAt != 0 && fresh.Calls+fresh.Scored+fresh.Costed > 0 {
		fa.statsOwed = true
	}
}

// errFleetStatsSize: the fleet's statistics of an agent are larger than
// a replica sends.
var errFleetStatsSize = errors.New("selfimprove: fleet: an agent's statistics over 256 KiB")

// viewStats puts the fleet's statistics of agent id, which this
// replica has not loaded, in st (a new agent's state when st has none),
// as an operation of the chain w, and reports whether the fleet has
// them. Statistics the fleet holds that are invalid are reported (at most
// once a minute per agent) and left out: st keeps this replica's own.
func (fl *fleetLink) viewStats(id string, st *agentState, w *replica.Chain) bool {
	l := fl.l
	b, err := fl.LoadStats(w, id)
	if err == errFleetSlow {
		return false // the Load took the chain's time: the fleet is slow
	}
	if err == nil && b != nil {
		var t agentState
		if len(b) > maxFleetStats {
			err = errFleetStatsSize
		} else if t, err = decodeState(b, id); err == nil {
			if st.AgentID == "" {
				*st = newState(id, l.defaultConfig.clone())
			}
			st.takeStats(&t)
			return true
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrFleetUnavailable):
		fl.onErr(nil, err)
	default:
		fl.reportBadStats(id, err)
	}
	return false
}

// maxBadStats bounds the agents whose invalid statistics a replica
// remembers having reported: beyond, it forgets them all.
const maxBadStats = 256

// reportBadStats reports invalid statistics of agent id in the fleet:
// counted in Metrics.FleetErrors each time, logged at most once per
// replica.BadEvery per agent.
func (fl *fleetLink) reportBadStats(id string, err error) {
	l := fl.l
	fl.Counts.Errors.Add(1)
	now := l.clock.Now().UnixNano()
	fl.badMu.Lock()
	last, seen := fl.badStats[id]
	report := !seen || now-last >= int64(replica.BadEvery) || now < last
	if report {
		if fl.badStats == nil || len(fl.badStats) >= maxBadStats {
			fl.badStats = map[string]int64{}
		}
		fl.badStats[id] = now
	}
	fl.badMu.Unlock()
	if report {
		l.log.Error("selfimprove: the fleet holds invalid statistics of the agent; replicas that have not loaded it report their own calls until one that runs it sends them again (reported once a minute per agent)",
			"agent", id, "error", err)
	}
}
