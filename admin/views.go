package admin

import (
	"net/url"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// AgentSummary is one agent in GET /api/agents.
type AgentSummary struct {
	// ID is the agent ID, readable: bytes that are not UTF-8 show as
	// U+FFFD. Ref is exact: the ID as an escaped path segment, for URLs
	// (/api/agents/{Ref}) and for the after= cursor.
	ID  string `json:"id"`
	Ref string `json:"ref"`
	// ConfigVersion is the version of the config in force.
	ConfigVersion int `json:"config_version"`
	// Stats are over the agent's analysis window.
	Stats selfimprove.Stats `json:"stats"`
	// Health is in [0, 1] (see Loop.Health): the whole window's success,
	// weighted by recency, whatever config ran it.
	Health float64 `json:"health"`
	// State is the agent's trouble state, by the rule of
	// docs/dashboard.md: StateTrouble, StateWatch or StateOK; Why says
	// why in a few words ("" when ok). Healthy is State not trouble.
	State   string `json:"state"`
	Why     string `json:"why,omitempty"`
	Healthy bool   `json:"healthy"`
	// Current is the calls under the config in force.
	Current CurrentView `json:"current"`
	// Route is the route in force, named: the ladder's primary for the
	// empty Config.Route (see Loop.Routes); Primary is the ladder's
	// primary ("" without a ladder, or for one whose primary is the
	// function's own default); Fallback reports that Route is one of the
	// ladder's fallbacks, or that the agent is away from its home route.
	Route    string `json:"route"`
	Primary  string `json:"primary"`
	Fallback bool   `json:"fallback"`
	// Next is what the loop will do next for the agent, and NextAt when
	// (absent: at the next call that calls for it).
	Next   string    `json:"next"`
	NextAt time.Time `json:"next_at,omitzero"`
	// Profile names the threshold in force; Critical and
	// ManualThreshold are the operator's settings.
	Profile         selfimprove.Profile `json:"profile"`
	Threshold       ThresholdView       `json:"threshold"`
	Critical        bool                `json:"critical"`
	ManualThreshold bool                `json:"manual_threshold"`
	// ChangeState is the state of the change under verification, else
	// of the latest change ("verifying", "confirmed", "rolled_back",
	// "superseded"); empty when there has been none.
	ChangeState selfimprove.ChangeState `json:"change_state,omitempty"`
	// Circuit is "closed", "open" or "half_open".
	Circuit selfimprove.Circuit `json:"circuit"`
	// PendingProposals counts the agent's proposals waiting for a person.
	PendingProposals int `json:"pending_proposals"`
	// Loaded reports that the agent is in memory.
	Loaded bool `json:"loaded"`
	// P95Latency is the 95th percentile of the durations of the agent's
	// calls since the process started, interpolated inside its latency
	// bucket (selfimprove.LatencyBuckets) as if the bucket's calls spread
	// evenly over it, up to where the sum of their durations lets them
	// reach (so that calls of a few µs show a few µs, not the 5 ms of the
	// first bucket's bound); the last bound when it is beyond them; 0 for
	// an agent with no calls in this process.
	P95Latency time.Duration `json:"p95_latency_ns,omitempty"`

	calls []selfimprove.CallBucket // the window's buckets, for the overview (a copy)
}

// ThresholdView is a Threshold with durations as Go duration strings
// ("10m0s").
type ThresholdView struct {
	Failures int    `json:"failures"`
	Window   string `json:"window"`
	Cooldown string `json:"cooldown"`
}

// AgentList is the answer of GET /api/agents: a page of agents, by ID.
type AgentList struct {
	// Now is the handler's time (Options.Now).
	Now    time.Time      `json:"now"`
	Agents []AgentSummary `json:"agents"`
	// Next is the after= value of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// AgentDetail is the answer of GET /api/agents/{agent}.
type AgentDetail struct {
	AgentSummary
	// Now is the handler's time (Options.Now).
	Now time.Time `json:"now"`
	// Config is the config in force.
	Config selfimprove.Config `json:"config"`
	// Versions are the config versions the loop holds, oldest first, the
	// current one last: each one's config, who or what made it and why,
	// and its verification.
	Versions []Version `json:"versions"`
	// Changes are the recent changes, oldest first (Loop.Changes).
	Changes []selfimprove.Change `json:"changes"`
	// Clusters are the failure clusters in the window, most failures
	// first.
	Clusters []selfimprove.Cluster `json:"clusters"`
	// Proposals are the agent's proposals, oldest first.
	Proposals []selfimprove.Proposal `json:"proposals"`
	// Home is the route the agent returns to while it is away from it;
	// Held, the class it is held for (see selfimprove.ProbePolicy).
	Home string        `json:"home,omitempty"`
	Held failure.Class `json:"held,omitempty"`
	// DeadRoutes are the routes dead for the agent now.
	DeadRoutes []selfimprove.DeadRoute `json:"dead_routes"`
	// FirstToken is the agent's time to first token since it was loaded
	// in this process (selfimprove.AgentView.FirstToken).
	FirstToken FirstTokenView `json:"first_token"`
	// Routes are the quality and cost figures by the route that answered
	// the calls, over the versions scored or costed
	// (selfimprove.AgentView.Routes); absent when none.
	Routes map[string]*QualityView `json:"routes,omitempty"`
}

// QualityView is the quality and cost figures of a config version or a
// route (see docs/quality.md): Scored calls scored, of mean score
// Quality; Costed calls with a cost, whose total over the successful ones
// among them is CostPerSuccess.
type QualityView struct {
	Scored         int     `json:"scored"`
	Quality        float64 `json:"quality"`
	Costed         int     `json:"costed"`
	Cost           float64 `json:"cost"`
	CostPerSuccess float64 `json:"cost_per_success"`
}

func qualityOf(s selfimprove.Stats) *QualityView {
	return &QualityView{Scored: s.Scored, Quality: s.Quality, Costed: s.Costed, Cost: s.Cost, CostPerSuccess: s.CostPerSuccess}
}

func routeQuality(m map[string]selfimprove.Stats) map[string]*QualityView {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*QualityView, len(m))
	for r, s := range m {
		out[r] = qualityOf(s)
	}
	return out
}

// FirstTokenView is an agent's time to first token: of each attempt whose
// stream reported its first token under a config with a
// FirstTokenTimeout, the time from the attempt's start to it.
type FirstTokenView struct {
	// Count is how many attempts measured one; 0 for an agent with none.
	Count uint64 `json:"count"`
	// Mean is their mean, and P90 their 90th percentile, interpolated
	// inside its bucket (selfimprove.LatencyBuckets; the last bound when
	// it is beyond them); 0 when Count is 0.
	Mean time.Duration `json:"mean_ns"`
	P90  time.Duration `json:"p90_ns"`
}

// firstToken summarises h, the histogram of an agent's times to first
// token.
func firstToken(h selfimprove.Histogram) FirstTokenView {
	if h.Count == 0 {
		return FirstTokenView{}
	}
	return FirstTokenView{Count: h.Count, Mean: h.Sum / time.Duration(h.Count), P90: quantile(h, 0.9)}
}

// Version is one config version of an agent.
type Version struct {
	Version int                `json:"version"`
	Config  selfimprove.Config `json:"config"`
	Current bool               `json:"current"`
	// MadeBy says who or what installed it: "default" (the first
	// config), "strategy" (an automatic tweak), "proposal" (a proposal
	// an operator approved), "rewind" (an operator's rewind), "operator"
	// (SetConfig), or "unknown" when the loop no longer holds the
	// change that installed it.
	MadeBy string `json:"made_by"`
	// Reason and At are the change's reason and time, when known.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// Change is the change that installed it, with its verification:
	// state, verdict, and the evidence (before and after stats); nil
	// when not known.
	Change *selfimprove.Change `json:"change,omitempty"`
	// Quality is the version's quality and cost figures; absent when it
	// has no scored or costed call the agent keeps.
	Quality *QualityView `json:"quality,omitempty"`
}

// ProposalList is the answer of GET /api/proposals.
type ProposalList struct {
	Proposals []selfimprove.Proposal `json:"proposals"`
}

// EventView is an event with its agent's exact reference.
type EventView struct {
	selfimprove.Event
	// AgentRef is the agent ID as an escaped path segment (see
	// AgentSummary.Ref).
	AgentRef string `json:"agent_ref"`
}

// EventList is the answer of GET /api/events: events oldest first.
type EventList struct {
	Events []EventView `json:"events"`
}

// SimilarList is the answer of GET /api/similar.
type SimilarList struct {
	Memories []selfimprove.Memory `json:"memories"`
}

// Result is the answer of a mutation: the agent as it stands after it,
// and the change or proposal it made, if any.
type Result struct {
	Agent    *AgentSummary         `json:"agent,omitempty"`
	Change   *selfimprove.Change   `json:"change,omitempty"`
	Proposal *selfimprove.Proposal `json:"proposal,omitempty"`
}

// ScoreResult is the answer of POST /api/agents/{agent}/score
// (selfimprove.Loop.ScoreCall): the score was taken, for the version it
// was credited to; a duplicate (the call ID, or the request's key,
// scored before) counted nothing; and the decision it led to, if any.
type ScoreResult struct {
	// Scored is true: the score counts, or counted when first given.
	Scored bool `json:"scored"`
	// Duplicate is true for a score whose call ID (or key) was scored
	// before: it counted nothing, and the answer is 200 all the same, so
	// that a grader's retry succeeds. Absent otherwise.
	Duplicate bool `json:"duplicate,omitempty"`
	// Version is the config version the score was credited to.
	Version int `json:"version"`
	// Decision is what the score decided: "confirmed" or "rolled_back"
	// (the change under verification, in Change), "applied" (a change
	// an analysis it started applied, in Change), "analysis" (it started
	// an analysis that has not answered yet). Absent when none.
	Decision string `json:"decision,omitempty"`
	// Change is the change decided or applied.
	Change *selfimprove.Change `json:"change,omitempty"`
}

// scoreResult is res as the API answers it.
func scoreResult(res selfimprove.ScoreResult) ScoreResult {
	out := ScoreResult{Scored: true, Duplicate: res.Duplicate, Version: res.Version}
	switch {
	case res.Confirmed != nil:
		out.Decision, out.Change = "confirmed", res.Confirmed
	case res.RolledBack != nil:
		out.Decision, out.Change = "rolled_back", res.RolledBack
	case res.Applied != nil:
		out.Decision, out.Change = "applied", res.Applied
	case res.Analysis:
		out.Decision = "analysis"
	}
	return out
}

// Ref returns the reference of an agent ID in URLs: the ID as one escaped
// path segment. Every byte string round-trips.
func Ref(agentID string) string { return url.PathEscape(agentID) }

// summary builds an agent's summary from its view and its window's
// buckets (Loop.ViewCalls).
func (s *server) summary(o *selfimprove.AgentView, calls []selfimprove.CallBucket) AgentSummary {
	v := AgentSummary{
		ID: strings.ToValidUTF8(o.AgentID, "\uFFFD"), Ref: Ref(o.AgentID),
		ConfigVersion: o.Config.Version, Stats: o.Stats, Health: o.Health,
		Profile: o.Profile, Threshold: thresholdView(o.Threshold),
		Critical: o.Critical, ManualThreshold: o.Manual,
		Circuit: o.Circuit, PendingProposals: o.Proposals, Loaded: o.Loaded,
	}
	if o.Change != nil {
		v.ChangeState = o.Change.State
	}
	v.Next, v.NextAt = o.Next, o.NextAt
	v.Current = s.current(o, calls)
	s.routeOf(&v, o)
	s.trouble(&v, o)
	if o.Latency.Count > 0 {
		v.P95Latency = quantile(o.Latency, 0.95)
	}
	return v
}

func thresholdView(t selfimprove.Threshold) ThresholdView {
	return ThresholdView{Failures: t.Failures, Window: t.Window.String(), Cooldown: t.Cooldown.String()}
}

// versions builds the version history of an agent from its configs, its
// changes and the recent events (for SetConfig's changes, which are not
// kept among the changes).
func versions(history []selfimprove.Config, changes []selfimprove.Change, events []selfimprove.Event) []Version {
	by := map[int]*selfimprove.Change{}
	for i := range changes {
		ch := &changes[i]
		if ch.State != selfimprove.ChangeRolledBack || by[ch.To.Version] == nil {
			by[ch.To.Version] = ch
		}
	}
	set := map[int]*selfimprove.Change{}
	for i := range events {
		if e := &events[i]; e.Type == selfimprove.EventConfigSet && e.Change != nil {
			set[e.Change.To.Version] = e.Change
		}
	}
	out := make([]Version, 0, len(history))
	for i, c := range history {
		v := Version{Version: c.Version, Config: c, Current: i == len(history)-1, MadeBy: "unknown"}
		ch := by[c.Version]
		if ch == nil {
			ch = set[c.Version]
		}
		switch {
		case ch != nil:
			v.Change, v.Reason, v.At = ch, ch.Reason, ch.AppliedAt
			switch {
			case ch.ProposalID != "":
				v.MadeBy = "proposal"
			case strings.HasPrefix(ch.Reason, "rewind to v"):
				v.MadeBy = "rewind"
			case ch.Window == nil:
				v.MadeBy = "operator"
			default:
				v.MadeBy = "strategy"
			}
		case c.Version == 1:
			v.MadeBy = "default"
		}
		out = append(out, v)
	}
	return out
}
