package selfimprove

import (
	"context"
	"errors"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Fleet is where the replicas of one service (several Loops, in one
// process or many) share what they learn about each agent. Attach one
// with WithFleet; without it a Loop keeps everything to itself.
//
// The fleet holds each agent's shared state: its config and version
// history, threshold, change under verification, decided changes,
// rejected tweaks, cooldown, circuit breaker and proposals, as one value
// in the agent state format (docs/format.md) without the call
// statistics, under a revision that grows with each commit.
// Every replica keeps a copy and its own call statistics; it sends its
// calls' counts in batches (Add) and gets back the counts pooled over the
// fleet, so that a change is verified on every replica's calls. A
// decision is a compare-and-set on the revision (Commit): the replica
// that loses takes the winner's state. A lease makes one replica run the
// strategy for a trigger. Notes share what one replica learns of every
// agent: dead routes and account-wide causes (see ProbePolicy).
//
// Every method must be safe for concurrent use, must return by ctx's
// deadline (the Loop gives each operation what is left of the
// WithFleetTimeout of the call or method it serves), must wrap
// ErrFleetUnavailable in its errors when the fleet cannot be reached (and
// only then), must not let a Commit that returned an error land later,
// and must treat the agent ID as data: any bytes, up to MaxAgentIDLen.
// A panic in a method (or in Subscribe's stop) is recovered: the
// operation fails as if the method had returned an error wrapping
// ErrFleetUnavailable that names the method and the panic (the replica
// backs off and reports an outage, and a commit's outcome is unknown, as
// with a lost answer); it never fails the call or crashes the process.
// fleettest.New is an implementation for Loops in one process; the
// redisfleet module is one
// for replicas sharing a Redis server. The loop's side is described in
// docs/fleet.md.
type Fleet interface {
	// Load returns agentID's shared state and its revision; revision 0
	// and a nil value when the fleet has none. An error that does not
	// wrap ErrFleetUnavailable says the fleet's state of the agent is
	// invalid: a Commit on the revision returned replaces it.
	Load(ctx context.Context, agentID string) (rev uint64, value []byte, err error)
	// Commit stores value as agentID's shared state if the fleet's
	// revision for it is still rev (0: the fleet has none), and returns
	// the new revision: rev+1, or, when the fleet had none, a revision
	// above any it may have given the agent before (a fleet that lost its
	// data must not give an old revision to a new state, or replicas
	// that knew the old one would keep their copy). When the revision
	// moved on it changes
	// nothing and returns an error wrapping ErrFleetConflict. After a
	// commit every subscriber, on every replica, is told.
	Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error)
	// Add adds the counts of one replica's calls to the fleet's, and
	// returns, for each delta in order, the agent's counts pooled over the
	// fleet for the delta's generation and the agent's current revision.
	// A delta with no calls, scores or costs only reads. The Stats of a
	// delta the fleet books replace the agent's (the last one booked is
	// kept, for as long as the counts).
	Add(ctx context.Context, deltas []FleetDelta) ([]FleetPool, error)
	// LoadStats returns the Stats of agentID's delta the fleet booked
	// last; nil when it has none. An error that does not wrap
	// ErrFleetUnavailable says the value held is invalid (it is set
	// aside). It must not download a value over 256 KiB to find that
	// out.
	LoadStats(ctx context.Context, agentID string) ([]byte, error)
	// Lease gives agentID's lease to owner for ttl, or renews it when
	// owner holds it; it reports false when another owner holds it.
	Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error)
	// Release ends owner's lease of agentID; it does nothing when owner
	// does not hold it.
	Release(ctx context.Context, agentID, owner string) error
	// Subscribe calls f with the agent ID and the new revision after each
	// commit, made by any replica, until stop is called. f must return
	// quickly; notifications may be lost (a replica also polls).
	Subscribe(f func(agentID string, rev uint64)) (stop func())
	// AppendEvents adds events to the fleet's log, which keeps the latest
	// ones (a documented number).
	AppendEvents(ctx context.Context, events []Event) error
	// Events returns up to limit of the latest events, oldest first.
	Events(ctx context.Context, limit int) ([]Event, error)
	// Note records, for every replica, that the route name is dead
	// (kind "route"), that the account-wide cause whose cluster ID is
	// name is in force (kind "cause"), or that the replica name is alive
	// (kind "replica", see Loop.FleetReplicas), until until, for reason
	// (at most 512 bytes). A later until extends a note in force, an
	// earlier one leaves it; an until not after now ends it. Note reports
	// whether a note of kind and name was in force at now, so that one
	// replica alone raises a cause, or its end. A fleet keeps at most
	// MaxFleetNotes notes: beyond, it drops the note that ends first of
	// the kind with the most notes, so that one kind's many notes (a
	// large fleet's replicas) never push out another's few.
	Note(ctx context.Context, kind, name, reason string, until, now time.Time) (was bool, err error)
	// Notes returns the notes of kind in force at now, at most
	// MaxFleetNotes, as DeadRoutes whose Route is the note's name.
	Notes(ctx context.Context, kind string, now time.Time) ([]DeadRoute, error)
}

// FleetCounts are calls counted for one arm of one config generation.
type FleetCounts struct {
	Calls, Failures int64
	// LatencyNS sums the calls' durations; SuccessLatencyNS those of
	// the successful ones.
	LatencyNS, SuccessLatencyNS int64
	// Consecutive is the run of failures the calls end with. Pooled, it
	// is the fleet's run as the deltas arrive: a delta with a success
	// starts it again (see Add).
	Consecutive int64
	// Scored counts the scores in [0, 1] the calls were given (in the
	// call or later, by Loop.Score), ScoreSum sums them and
	// ScoreSquares their squares. Costed counts the calls that reported
	// a cost, CostOK the successful ones among them, and Cost is their
	// total. A delta may carry scores and costs without calls: those of
	// earlier calls of the same arm.
	Scored, Costed, CostOK int64
	ScoreSum, ScoreSquares float64
	Cost                   float64
}

// Add adds the later counts o to c: the sums add up, and the run of
// failures goes on through o, or is o's own when o has a success.
func (c *FleetCounts) Add(o FleetCounts) {
	c.Calls += o.Calls
	c.Failures += o.Failures
	c.LatencyNS += o.LatencyNS
	c.SuccessLatencyNS += o.SuccessLatencyNS
	c.Scored += o.Scored
	c.ScoreSum += o.ScoreSum
	c.ScoreSquares += o.ScoreSquares
	c.Costed += o.Costed
	c.CostOK += o.CostOK
	c.Cost += o.Cost
	if o.Calls > o.Failures {
		c.Consecutive = o.Consecutive
	} else {
		c.Consecutive += o.Failures
	}
}

// fits reports whether c's counters fit an agent's state, whose counters
// stay below 2^50 (docs/format.md).
func (c FleetCounts) fits() bool {
	return c.Calls < maxCount && c.Failures < maxCount && c.Consecutive < maxCount &&
		c.Scored < maxCount && c.Costed < maxCount && c.CostOK < maxCount
}

// errFleetPoolRange is the error of a pool whose counts an agent's state
// cannot hold (counters below 2^50, docs/format.md): values planted in
// the fleet, refused rather than booked, so that the agent stays
// savable.
var errFleetPoolRange = errors.New("selfimprove: fleet: pooled counts beyond what an agent's state holds (2^50)")

// negative reports whether a sum of c is below zero (a float sum by more
// than its rounding: c is a difference of sums).
func (c FleetCounts) negative() bool {
	const tol = -1e-9
	return c.Calls < 0 || c.Failures < 0 || c.LatencyNS < 0 || c.SuccessLatencyNS < 0 ||
		c.Scored < 0 || c.Costed < 0 || c.CostOK < 0 ||
		c.ScoreSum < tol*float64(c.Scored+1) || c.ScoreSquares < tol*float64(c.Scored+1) || c.Cost < tol*(c.Cost+1)
}

// sub returns c's sums minus o's.
func (c FleetCounts) sub(o FleetCounts) FleetCounts {
	return FleetCounts{Calls: c.Calls - o.Calls, Failures: c.Failures - o.Failures, LatencyNS: c.LatencyNS - o.LatencyNS,
		SuccessLatencyNS: c.SuccessLatencyNS - o.SuccessLatencyNS,
		Scored:           c.Scored - o.Scored, ScoreSum: c.ScoreSum - o.ScoreSum, ScoreSquares: c.ScoreSquares - o.ScoreSquares,
		Costed: c.Costed - o.Costed, CostOK: c.CostOK - o.CostOK, Cost: c.Cost - o.Cost}
}

// quality returns c's scores and costs as a qualityRec's.
func (c FleetCounts) quality() qualityRec {
	return qualityRec{Scored: c.Scored, Sum: c.ScoreSum, Squares: c.ScoreSquares, Costed: c.Costed, CostOK: c.CostOK, Cost: c.Cost}
}

// addQuality adds the score and cost of one call (failed or not) to c.
func (c *FleetCounts) addQuality(q quality, failed bool) {
	if q.scored {
		c.Scored++
		c.ScoreSum += q.score
		c.ScoreSquares += q.score * q.score
	}
	if q.costed {
		c.Costed++
		c.Cost += q.cost
		if !failed {
			c.CostOK++
		}
	}
}

// FleetFailure is one failed call, as replicas tell each other of it.
type FleetFailure struct {
	// Seq numbers the agent's failures in the fleet (set by the fleet;
	// 0 in a delta).
	Seq uint64 `json:"seq,omitempty"`
	// Replica is the replica that saw it.
	Replica string `json:"replica"`
	// Gen is the config generation it started under.
	Gen uint64 `json:"gen"`
	// EndNS is when it ended (Unix ns); DurationNS how long it took.
	EndNS      int64         `json:"end_ns"`
	DurationNS int64         `json:"duration_ns"`
	Version    int           `json:"version"`
	Class      failure.Class `json:"class"`
	// Text is its scrubbed error text, at most 200 bytes.
	Text string `json:"text"`
}

// FleetDelta is what one replica counted for one agent since its last
// Add.
type FleetDelta struct {
	AgentID string
	Replica string
	// Gen is the config generation the calls started under.
	Gen uint64
	// Change counts the calls of the config in force (of the change
	// under verification), Control those of the previous config under
	// MethodCanary.
	Change, Control FleetCounts
	// Failures are the failures among them, at most MaxFleetFailures.
	Failures []FleetFailure
	// Batch numbers the replica's deltas, rising for each agent (0: not
	// numbered): a replica numbers its deltas of every agent in one
	// sequence, so that an agent evicted and loaded again goes on above
	// its last number. A fleet books a numbered delta once, however
	// often it is sent: a delta whose answer was lost is sent again,
	// unchanged; it takes any number above the last it booked of the
	// replica and agent.
	Batch uint64
	// Stats, when set, are the agent's call statistics as the replica
	// holds them (its own calls and those the fleet brought it): its
	// analysis window, call counters, failure clusters and scores and
	// costs per config version, in the agent state format
	// (docs/format.md) without the shared state, at most 256 KiB. A
	// replica sends them with its next delta, at most every 2 seconds
	// per agent, after calls, scores or costs of its own, or after the
	// fleet brought it other replicas' calls that the statistics it sent
	// last lacked; the fleet keeps the last ones, so that a replica that
	// has not loaded the agent answers Loop.Stats, Health, Clusters and
	// View with the fleet's calls (LoadStats).
	Stats []byte
}

// FleetPool is an agent's counts pooled over the fleet, returned by Add.
type FleetPool struct {
	// Rev is the agent's current revision (0: none).
	Rev uint64
	// Gen is the generation counted (the delta's).
	Gen uint64
	// Change and Control are every replica's calls of generation Gen
	// (zero when the fleet has counted a later generation since).
	Change, Control FleetCounts
	// Total is every replica's calls of every generation.
	Total FleetCounts
	// Failures are the agent's latest failures, at most
	// MaxFleetFailures, oldest first.
	Failures []FleetFailure
	// Err, when set, says that the fleet found invalid values in the
	// agent's data (set aside, or left out of this pool); the delta was
	// booked. The Loop reports it at most once a minute per agent.
	Err error
}
