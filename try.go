package selfimprove

import "fmt"

// Try applies cfg to agentID as a change verified like any other: the
// config becomes the agent's next version at once, is judged on success,
// latency, quality and cost against the config before it
// (RollbackPolicy), and is rolled back if it is worse, or confirmed; its
// Change is returned, and its verdict comes as any change's (Changes,
// the events). It is the way to try a config safely, say a cheaper
// model: SetConfig installs a config unverified, Rewind only a version
// the agent ran. A config rolled back before may be tried again (an
// operator chose it); one on a route that is dead is refused.
//
// cfg.Version must be 0, or the agent's current version (a config read
// with Config and edited). It fails with ErrInvalidConfig naming the
// field for a config outside its bounds, with ErrVerifying while
// another change is verified (try again once it is decided), and with
// ErrTweakRejected for the current config or a dead route. Under
// propose-only (SetProposeOnly, RollbackPolicy.ProposeOnly) nothing is
// applied without an approval: the config is filed as a pending
// Proposal, and Try returns ErrFiledForApproval with a Change that holds
// only the proposal's ID (ProposalID); Approve applies it, verified. The
// change (or the proposal) is saved before Try returns. After Close it
// returns ErrClosed and writes nothing.
func (l *Loop) Try(agentID string, cfg Config, reason string) (Change, error) {
	if err := cfg.validate(); err != nil {
		return Change{}, err
	}
	var ch *Change
	var filed *Proposal
	err := l.operate(agentID, func(a *agent) (effects, error) {
		if err := checkVersion(cfg.Version, a.s.Config.Version); err != nil {
			return effects{}, err
		}
		c, p, eff, err := a.s.try(l.clock.Now(), cfg, reason, &l.rules)
		ch, filed = c, p
		return eff, err
	})
	switch {
	case err != nil:
		return Change{}, err
	case filed != nil:
		return Change{AgentID: agentID, ProposalID: filed.ID}, fmt.Errorf("%w: agent %q is propose-only: the config is proposal %s (Approve applies it)", ErrFiledForApproval, agentID, filed.ID)
	}
	l.m.improvements.Add(1)
	return *ch, nil
}
