package admin

import (
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// The trouble states of an agent (AgentSummary.State), worst first. The
// rule is in docs/dashboard.md ("Trouble at a glance").
const (
	StateTrouble = "trouble"
	StateWatch   = "watch"
	StateOK      = "ok"
)

// stateRank orders the states for the overview and the list: trouble
// first.
func stateRank(state string) int {
	switch state {
	case StateTrouble:
		return 0
	case StateWatch:
		return 1
	}
	return 2
}

// CurrentView is what the agent's calls under the config in force say:
// the calls of its analysis window that ended since that config was
// installed (Since; zero when it was installed before the window, or
// when the loop does not know when), counted by the window's buckets
// that start at or after Since, or, while the config is verified, by its
// verification's own count (exact). For a config whose change was
// confirmed, the verification's count plus the buckets that start at or
// after the decision, when that counts more calls: a bucket that holds
// the change (calls of the config before it too) is never counted.
type CurrentView struct {
	Version     int       `json:"version"`
	Since       time.Time `json:"since,omitzero"`
	Calls       int       `json:"calls"`
	Failures    int       `json:"failures"`
	SuccessRate float64   `json:"success_rate"`
}

// installedAt returns when the config in force of o's agent was
// installed, as its latest change tells; ok is false when the change
// does not tell (a config set by SetConfig with no change under
// verification), and events are then asked.
func (s *server) installedAt(o *selfimprove.AgentView) (time.Time, bool) {
	v, c := o.Config.Version, o.Change
	switch {
	case c == nil:
		return time.Time{}, v <= 1 // the first config: since the start
	case c.To.Version == v && c.State != selfimprove.ChangeRolledBack && c.State != selfimprove.ChangeSuperseded:
		return c.AppliedAt, true
	case c.State == selfimprove.ChangeRolledBack && c.From.Version == v:
		return c.DecidedAt, true
	case c.State == selfimprove.ChangeSuperseded && c.To.Version != v:
		return c.DecidedAt, true // SetConfig superseded it then
	}
	evs := s.l.Events(selfimprove.EventFilter{AgentIDs: []string{o.AgentID}, Types: []selfimprove.EventType{selfimprove.EventConfigSet}, Limit: 1})
	if k := len(evs); k > 0 && evs[k-1].Change != nil && evs[k-1].Change.To.Version == v {
		return evs[k-1].Time, true
	}
	return time.Time{}, false
}

// current returns the calls of o's agent under its config in force (see
// CurrentView), from the window's buckets b.
func (s *server) current(o *selfimprove.AgentView, b []selfimprove.CallBucket) CurrentView {
	cv := CurrentView{Version: o.Config.Version, SuccessRate: 1}
	since, _ := s.installedAt(o)
	c := o.Change
	if c != nil && c.State == selfimprove.ChangeVerifying && c.To.Version == cv.Version {
		cv.Since, cv.Calls, cv.Failures = c.AppliedAt, c.After.Calls, c.After.Failures
	} else {
		cv.Since = since
		cv.Calls, cv.Failures = callsFrom(b, since)
		if c != nil && c.State == selfimprove.ChangeConfirmed && c.To.Version == cv.Version && !c.DecidedAt.IsZero() {
			// Both count calls under the config only: keep the more.
			n, f := callsFrom(b, c.DecidedAt)
			if n += c.After.Calls; n > cv.Calls {
				cv.Calls, cv.Failures = n, f+c.After.Failures
			}
		}
	}
	if cv.Calls > 0 {
		cv.SuccessRate = float64(cv.Calls-cv.Failures) / float64(cv.Calls)
	}
	return cv
}

// callsFrom sums the calls and failures of the buckets b that start at or
// after since.
func callsFrom(b []selfimprove.CallBucket, since time.Time) (calls, failures int) {
	for _, k := range b {
		if !k.Start.Before(since) {
			calls += k.Calls
			failures += k.Failures
		}
	}
	return calls, failures
}

// routeOf fills v's route columns from o and the agent's ladder.
func (s *server) routeOf(v *AgentSummary, o *selfimprove.AgentView) {
	r := s.l.Routes(o.AgentID)
	v.Route, v.Primary = o.Config.Route, r.Primary
	if v.Route == "" {
		v.Route = r.Primary
	}
	v.Fallback = o.Home != "" || v.Route != r.Primary && slices.Contains(r.Fallbacks, v.Route)
}

// trouble sets v's State and Why from o by the rule of docs/dashboard.md:
// trouble when the circuit is not closed, the route in force is dead,
// the calls under the config in force succeed less than
// Options.UnhealthyBelow, or the run of failures reached the threshold;
// watch while a change is verified, on a fallback route, or with a
// proposal waiting; ok otherwise.
func (s *server) trouble(v *AgentSummary, o *selfimprove.AgentView) {
	cur := &v.Current
	switch {
	case o.Circuit != selfimprove.CircuitClosed:
		v.State, v.Why = StateTrouble, "circuit "+string(o.Circuit)
	case deadRoute(o, v.Route):
		v.State, v.Why = StateTrouble, fmt.Sprintf("route %q is dead", v.Route)
	case cur.Calls > 0 && cur.SuccessRate < s.o.UnhealthyBelow:
		v.State, v.Why = StateTrouble, fmt.Sprintf("v%d: %d of %d calls failed", cur.Version, cur.Failures, cur.Calls)
	case o.Stats.ConsecutiveFailures >= max(o.Threshold.Failures, 1):
		v.State, v.Why = StateTrouble, fmt.Sprintf("%d failures in a row", o.Stats.ConsecutiveFailures)
	case v.ChangeState == selfimprove.ChangeVerifying:
		v.State, v.Why = StateWatch, fmt.Sprintf("verifying v%d", cur.Version)
	case v.Fallback:
		v.State, v.Why = StateWatch, fmt.Sprintf("on fallback %q", v.Route)
	case o.Proposals > 0:
		v.State, v.Why = StateWatch, fmt.Sprintf("%d proposal(s) waiting", o.Proposals)
	default:
		v.State, v.Why = StateOK, ""
	}
	v.Healthy = v.State != StateTrouble
}

// deadRoute reports that the route in force of o's agent (named route)
// is dead.
func deadRoute(o *selfimprove.AgentView, route string) bool {
	for _, d := range o.DeadRoutes {
		if d.Route == o.Config.Route || d.Route == route {
			return true
		}
	}
	return false
}
