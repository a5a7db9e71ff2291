package selfimprove

import "fmt"

// SetProposeOnly puts agentID in propose-only mode (on) or takes it out:
// every tweak a strategy proposes for it is filed as a Proposal, with its
// analysis, instead of applied, as RollbackPolicy.ProposeOnly does for
// every agent of the Loop; an approved one (Approve) is verified like any
// change. An agent is propose-only when either says so: off here does not
// exempt an agent from a loop-wide ProposeOnly. The loop's own route moves
// (a probe of the primary that succeeds) are not tweaks and still happen.
// The setting is saved with the agent's state before SetProposeOnly
// returns (it survives restarts, and a fleet shares it). Default off.
func (l *Loop) SetProposeOnly(agentID string, on bool) error {
	return l.update(agentID, EventProposeOnlySet, fmt.Sprintf("agent %q: propose-only=%v by operator", agentID, on),
		func(s *agentState) { s.ProposeOnly = on })
}

// proposeOnly reports, under a's lock, whether its tweaks are filed for
// approval (see ruleBook.proposeOnly).
func (l *Loop) proposeOnly(a *agent) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return l.rules.proposeOnly(&a.s)
}
