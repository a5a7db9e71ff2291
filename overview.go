package selfimprove

// AgentOverview is what the loop knows of one agent at a glance (see
// Loop.Overview).
type AgentOverview struct {
	AgentID string
	// Config is the config in force.
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
	// Change is the change under verification, else the latest decided
	// change; nil when the agent has had none.
	Change *Change
	// Circuit is the state of the agent's circuit breaker.
	Circuit Circuit
	// Proposals counts the agent's pending proposals.
	Proposals int
	// Loaded reports that the agent is in memory (else it was read from
	// the store).
	Loaded bool
}

// Overview returns what the loop knows of agentID, read at once, and
// whether the loop knows the agent (in memory, or in the store before
// Close). Like the other getters it creates no agent and writes nothing.
func (l *Loop) Overview(agentID string) (AgentOverview, bool) {
	now := l.clock.Now().UnixNano()
	o := AgentOverview{AgentID: agentID}
	_, o.Loaded = l.agents.Load(agentID)
	known := l.view(agentID, func(s *agentState) {
		o.Config = s.Config.clone()
		o.Stats = s.stats(now)
		o.Health = s.health(now)
		o.Threshold, o.Profile = s.threshold(now)
		o.Critical, o.Manual = s.Critical, s.Manual != nil
		if s.Verifying != nil {
			ch := s.verifying()
			o.Change = &ch
		} else if n := len(s.Changes); n > 0 {
			ch := s.Changes[n-1]
			o.Change = &ch
		}
		o.Circuit = CircuitClosed
		switch until := s.CircuitOpenUntil; {
		case until == 0:
		case now < until:
			o.Circuit = CircuitOpen
		default:
			o.Circuit = CircuitHalfOpen
		}
		for _, p := range s.Proposals {
			if p.Status == ProposalPending {
				o.Proposals++
			}
		}
	})
	return o, known
}
