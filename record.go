package selfimprove

import (
	"context"
	"fmt"
	"time"
)

// maxRecordDuration bounds a recorded call's duration: a longer one is
// booked as this long.
const maxRecordDuration = 24 * time.Hour

// maxRecordCost bounds a recorded call's cost: a larger one, as a NaN or
// a negative one, is not booked.
const maxRecordCost = 1e12

// Record books a call that ran outside the loop, as ExecuteWithImprovement
// books the calls it runs: an agent in another process or language
// reports what its call did (the admin package's outcome intake calls
// Record). r describes the call: Err (nil for a success; a failure is
// classified, scrubbed and cut like any, from its StatusCode or
// FailureClass method or its text), Duration (cut to 24 hours), Attempts
// (0 counts as 1), ConfigVersion (the version of the config the call ran
// under, as Config returned it; 0: the version in force) and Ignored (the
// caller gave up: counted as ignored, not as a failure) and Cost (the
// call's cost, booked per config version and route as AddCost's; 0, a
// negative or a NaN one: none). Its other fields are not read.
//
// The call counts exactly as a wrapped one: a failure may trigger the
// strategy and apply a change; a call under the version being verified
// may confirm it or roll it back; under MethodCanary, a call under the
// version before it counts for the control arm. A call that ran under an
// earlier version counts in the agent's stats but neither triggers a
// change nor judges the one in force, as a wrapped call that began before
// the change. The returned Report is r completed as ExecuteWithImprovement
// completes its own: ID (for Loop.Score), Version (the version in force
// after the booking), Arm, Improvement, Rollback, Confirmed,
// ImprovementTriggered and LoopErr.
// Nothing is booked, and Record returns an error wrapping
// ErrInvalidAgentID, ErrClosed or ErrUnknownVersion (a version the agent
// never had), when the agent ID is invalid, the loop is closed, or the
// version is unknown.
func (l *Loop) Record(ctx context.Context, agentID string, r Report) (Report, error) {
	if err := checkAgentID(agentID); err != nil {
		return r, err
	}
	if l.isClosed.Load() {
		return r, ErrClosed
	}
	a, err := l.agent(agentID)
	if a == nil {
		return r, err
	}
	r.LoopErr = err
	if r.ConfigVersion < 0 || r.ConfigVersion > l.maxVersion(a) {
		return r, fmt.Errorf("%w: agent %.64q ran version %d, which it never had", ErrUnknownVersion, agentID, r.ConfigVersion)
	}
	inst := a.cfg.Load()
	c := begun{id: agentID, gen: inst.gen, version: inst.Version, route: inst.Route}
	switch {
	case r.ConfigVersion == 0 || r.ConfigVersion == inst.Version:
		if inst.prev != nil {
			c.arm = ArmChange
		}
	case inst.prev != nil && r.ConfigVersion == inst.prev.Version:
		c.arm, c.version, c.route = ArmControl, inst.prev.Version, inst.prev.Route
	default:
		// An earlier version: another generation than the one in force.
		c.gen, c.version, c.route = inst.gen-1, r.ConfigVersion, ""
	}
	r.Duration = min(max(r.Duration, 0), maxRecordDuration)
	r.Attempts = max(r.Attempts, 1)
	r.ConfigVersion, r.Arm = c.version, c.arm
	r.Success = r.Err == nil
	if r.Success {
		r.Ignored = false
	}
	end := l.clock.Now()
	if r.Ignored {
		// finish counts a call as ignored when its context ended.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ctx = cctx
	} else {
		ctx = context.WithoutCancel(ctx)
	}
	if r.Cost > 0 && r.Cost <= maxRecordCost {
		c.q = quality{cost: r.Cost, costed: true}
	} else {
		r.Cost = 0
	}
	r.ID = callID(end.UnixNano(), c.version)
	l.finish(ctx, a, agentID, c, &r, end.UnixNano(), r.Duration, nil)
	return r, nil
}

// maxVersion returns the highest config version a has had.
func (l *Loop) maxVersion(a *agent) int {
	a, err := l.lockAgent(a, a.id, 0)
	if a == nil || err != nil {
		return 0
	}
	defer a.mu.Unlock()
	return max(a.s.MaxVersion, a.s.Config.Version)
}
