package selfimprove

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"time"
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

// DailySummary returns the views of the agents in memory (see
// WithMaxAgents) that made calls or had changes in the last 24 hours,
// sorted by agent ID.
func (l *Loop) DailySummary() Summary {
	now := l.clock.Now()
	out := Summary{Time: now.UTC()}
	l.eachAgent(func(a *agent) {
		v := AgentView{AgentID: a.id, Loaded: true}
		v.fillLocked(&a.s, now)
		if v.Stats.CallsPerDay > 0 || v.Applied+v.Confirmed+v.RolledBack > 0 {
			a.counters(&v)
			out.Agents = append(out.Agents, v)
		}
	})
	slices.SortFunc(out.Agents, func(x, y AgentView) int { return cmp.Compare(x.AgentID, y.AgentID) })
	return out
}

// nextDaily returns the wait from now until the next time of day at.
func nextDaily(now time.Time, at time.Duration) time.Duration {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	next := day.Add(at % (24 * time.Hour))
	if !next.After(now) {
		next = next.Add(24 * time.Hour)
	}
	return next.Sub(now)
}

// summaryLoop sends the daily summary until Close.
func (l *Loop) summaryLoop(at time.Duration) {
	defer close(l.summaryDone)
	for {
		t := time.NewTimer(nextDaily(l.clock.Now(), at))
		select {
		case <-t.C:
			s := l.DailySummary()
			l.notify(&Event{ID: newID(s.Time), Time: s.Time, Type: EventDailySummary, Summary: &s,
				Message: "daily summary of " + strconv.Itoa(len(s.Agents)) + " agents"})
		case <-l.stopFlush:
			t.Stop()
			return
		}
	}
}
