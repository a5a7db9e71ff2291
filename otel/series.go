package otel

import (
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// agentSeries are the series of the duration histogram: one for each of
// the first limit agents seen, and _other for the rest (and for an agent
// whose ID is "_other"). It holds at most limit agents, whatever the calls'
// agent IDs, and is safe for concurrent use.
type agentSeries struct {
	limit int
	mu    sync.RWMutex
	known map[string]*outcomeSets
	other *outcomeSets
}

// outcomeSets are the record options of an agent's series, one an outcome
// the histogram records, made once: a call then records without building
// its attributes.
type outcomeSets struct {
	success, failure metric.RecordOption
}

func newAgentSeries(limit int) *agentSeries {
	return &agentSeries{limit: limit, known: make(map[string]*outcomeSets), other: newOutcomeSets(otherAgents)}
}

func newOutcomeSets(agent string) *outcomeSets {
	a := attribute.String("agent", agent)
	return &outcomeSets{
		success: metric.WithAttributeSet(attribute.NewSet(a, attribute.String("outcome", "success"))),
		failure: metric.WithAttributeSet(attribute.NewSet(a, attribute.String("outcome", "failure"))),
	}
}

// of returns the series of agentID: its own when it has one or there is
// room for it, else _other's. An agent seen before costs a read lock and
// a map lookup, and allocates nothing.
func (s *agentSeries) of(agentID string) *outcomeSets {
	s.mu.RLock()
	o, ok := s.known[agentID]
	full := len(s.known) >= s.limit
	s.mu.RUnlock()
	switch {
	case ok:
		return o
	case full || agentID == otherAgents:
		return s.other
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.known[agentID]; ok {
		return o
	}
	if len(s.known) >= s.limit {
		return s.other
	}
	// A copy of the ID: the caller's may share a larger buffer.
	o = newOutcomeSets(strings.ToValidUTF8(agentID, "\uFFFD"))
	s.known[strings.Clone(agentID)] = o
	return o
}
