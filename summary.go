package selfimprove

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Summary is the daily summary: how each agent did.
type Summary struct {
	// Time is when it was made, in UTC.
	Time   time.Time      `json:"time"`
	Agents []AgentSummary `json:"agents"`
}

// AgentSummary is one agent's line of the Summary.
type AgentSummary struct {
	AgentID string `json:"agent_id"`
	// Calls counts the calls in the last 24 hours (to within 15 minutes).
	Calls int `json:"calls"`
	// SuccessRate is over the agent's analysis window (3 h, 24 h or
	// 72 h, by its profile); Health is Loop.Health.
	SuccessRate float64 `json:"success_rate"`
	Health      float64 `json:"health"`
	// Applied, Confirmed and RolledBack count the changes applied,
	// confirmed and rolled back in the last 24 hours.
	Applied    int `json:"applied"`
	Confirmed  int `json:"confirmed"`
	RolledBack int `json:"rolled_back"`
}

// DailySummary returns the summary of the agents in memory (see
// WithMaxAgents) that made calls or had changes in the last 24 hours,
// sorted by agent ID.
func (l *Loop) DailySummary() Summary {
	now := l.clock.Now()
	n, since := now.UnixNano(), now.Add(-24*time.Hour)
	out := Summary{Time: now.UTC()}
	l.eachAgent(func(a *agent) {
		st := a.s.stats(n)
		as := AgentSummary{AgentID: a.id, Calls: st.CallsPerDay, SuccessRate: st.SuccessRate, Health: a.s.Tracker.health(n)}
		changes := a.s.Changes
		if v := a.s.Verifying; v != nil {
			changes = append(slices.Clip(changes), *v)
		}
		for _, c := range changes {
			if c.Reason == "set by operator" {
				continue
			}
			if c.AppliedAt.After(since) {
				as.Applied++
			}
			if c.DecidedAt.After(since) {
				switch c.State {
				case ChangeConfirmed:
					as.Confirmed++
				case ChangeRolledBack:
					as.RolledBack++
				}
			}
		}
		if as.Calls > 0 || as.Applied+as.Confirmed+as.RolledBack > 0 {
			out.Agents = append(out.Agents, as)
		}
	})
	slices.SortFunc(out.Agents, func(x, y AgentSummary) int { return cmp.Compare(x.AgentID, y.AgentID) })
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
