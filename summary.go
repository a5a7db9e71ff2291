package selfimprove

import (
	"encoding/json"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Summary is the daily summary: how each agent did. In JSON (in
// Event.Summary, for webhooks and the event stream) each agent is a line
// of its day: agent_id, calls (Stats.CallsPerDay), success_rate
// (Stats.SuccessRate), health, applied, confirmed and rolled_back.
type Summary struct {
	// Time is when it was made, in UTC.
	Time time.Time
	// Agents are the views of the agents in memory (see WithMaxAgents)
	// that made calls or had changes in the last 24 hours, sorted by
	// agent ID.
	Agents []AgentView
}

// summaryJSON is a Summary on the wire.
type summaryJSON struct {
	Time   time.Time     `json:"time"`
	Agents []summaryLine `json:"agents"`
}

// summaryLine is one agent's line of a summary on the wire.
type summaryLine struct {
	AgentID     string  `json:"agent_id"`
	Calls       int     `json:"calls"`
	SuccessRate float64 `json:"success_rate"`
	Health      float64 `json:"health"`
	Applied     int     `json:"applied"`
	Confirmed   int     `json:"confirmed"`
	RolledBack  int     `json:"rolled_back"`
}

// MarshalJSON writes s with a line of figures for each agent.
func (s Summary) MarshalJSON() ([]byte, error) {
	w := summaryJSON{Time: s.Time}
	if s.Agents != nil {
		w.Agents = make([]summaryLine, len(s.Agents))
	}
	for i := range s.Agents {
		v := &s.Agents[i]
		w.Agents[i] = summaryLine{AgentID: v.AgentID, Calls: v.Stats.CallsPerDay, SuccessRate: v.Stats.SuccessRate,
			Health: v.Health, Applied: v.Applied, Confirmed: v.Confirmed, RolledBack: v.RolledBack}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes: each agent's view holds
// the figures of its line, and no more.
func (s *Summary) UnmarshalJSON(b []byte) error {
	var w summaryJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = Summary{Time: w.Time}
	if w.Agents != nil {
		s.Agents = make([]AgentView, len(w.Agents))
	}
	for i, a := range w.Agents {
		s.Agents[i] = AgentView{AgentID: a.AgentID, Stats: Stats{CallsPerDay: a.Calls, SuccessRate: a.SuccessRate},
			Health: a.Health, Applied: a.Applied, Confirmed: a.Confirmed, RolledBack: a.RolledBack}
	}
	return nil
}

// AgentView is what the loop knows of one agent, read at once: the one
// per-agent view. Loop.View and Loop.DailySummary fill every field.
// Loop.Views, for metrics exporters, fills only those it reads without
// the agent's lock: AgentID, Loaded, Config, Circuit, and the counters
// Successes, Failures, Ignored, Latency and FirstToken.
type AgentView struct {
	AgentID string
	// Loaded reports that the agent is in memory (else it was read from
	// the store).
	Loaded bool
	// Config is the config in force. Like the config fn is given, its
	// Params map must not be modified.
	Config Config
	// Stats are over the analysis window; Health as Loop.Health.
	Stats  Stats
	Health float64
	// Threshold is the threshold in force and Profile its profile;
	// Critical reports the mark of MarkCritical, Manual a threshold set
	// with SetThreshold.
	Threshold Threshold
	Profile   Profile
	Critical  bool
	Manual    bool
	// ProposeOnly reports the mode SetProposeOnly set for the agent
	// (not the loop-wide RollbackPolicy.ProposeOnly).
	ProposeOnly bool
	// Change is the change under verification, else the latest decided
	// change; nil when the agent has had none.
	Change *Change
	// Circuit is the state of the agent's circuit breaker (always
	// CircuitClosed without WithCircuitBreaker).
	Circuit Circuit
	// Proposals counts the agent's pending proposals.
	Proposals int
	// Applied, Confirmed and RolledBack count the changes applied,
	// confirmed and rolled back in the last 24 hours (SetConfig's are
	// not counted).
	Applied, Confirmed, RolledBack int
	// Successes, Failures and Ignored count the agent's calls by outcome
	// since it was loaded in this process (Ignored: cancelled by their
	// caller's context, see Report.Ignored); Stats counts the window's.
	// They start again from zero when an idle agent is evicted and
	// loaded again, and are zero for an agent not in memory.
	Successes, Failures, Ignored int64
	// Latency is the histogram of the durations of those successful and
	// failed calls (each whole call: every attempt and the waits).
	Latency Histogram
	// FirstToken is the histogram of the times to first token of those
	// calls' attempts (Sum/Count is the mean): of each attempt that
	// reported its first token (stream.FirstToken) under a config with a
	// FirstTokenTimeout, the time from its start to the report. It is the
	// zero Histogram (Count 0, no Bounds nor Counts) for an agent with no
	// such attempt.
	FirstToken Histogram
	// Next is what the loop will do next for the agent, in plain text,
	// such as "cooling down; next: route "gpt-4o-mini" if the current one
	// keeps failing", and NextAt when it may happen (zero: at the next
	// call that calls for it).
	Next   string
	NextAt time.Time
	// Home is the route the agent returns to once a probe of it succeeds,
	// while it is away from it (see ProbePolicy); "" otherwise. Held is
	// the class the agent is held for ("" when it is not).
	Home string
	Held failure.Class
	// DeadRoutes are the routes dead for the agent now: its own finds and
	// the Loop's.
	DeadRoutes []DeadRoute
	// Versions are the quality and cost figures (Stats's Scored to
	// CostPerSuccess, the rest zero) of the config versions the agent
	// has scored or costed calls for, by version, at most 16; Routes
	// splits the same calls by the route that answered each (its last
	// attempt's: a fallback within the call, a route fitted to the
	// request, a probe of the primary), a late score (Loop.Score) going
	// to its version's route. nil when none (see docs/quality.md).
	Versions map[int]Stats
	Routes   map[string]Stats
}

// DeadRoute is a route marked dead (see ProbePolicy).
type DeadRoute struct {
	Route string    `json:"route"`
	Until time.Time `json:"until"`
	// Reason is the failure that marked it, scrubbed, at most 512 bytes.
	Reason string `json:"reason"`
}

// Histogram is a latency histogram: Counts[i] counts the calls that took
// at most Bounds[i] and more than Bounds[i-1]; the last count, those
// longer than the last bound. Bounds are LatencyBuckets.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	// Count is the sum of Counts; Sum the sum of the calls' durations.
	Count uint64
	Sum   time.Duration
}

// Circuit is the state of an agent's circuit breaker.
type Circuit string
