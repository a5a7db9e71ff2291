package selfimprove

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// ProposalStatus is where a Proposal stands.
type ProposalStatus string

// Proposal statuses. A proposal starts pending. Approve moves one with a
// config through approved to applied (the config is installed and
// verified like any tweak), and then to confirmed, rolled_back or
// superseded as its change is decided; one with only a rule stops at
// approved, for a person to carry out. Reject moves a pending (or
// approved, rule-only) proposal to rejected.
const (
	ProposalPending    ProposalStatus = "pending"
	ProposalApproved   ProposalStatus = "approved"
	ProposalApplied    ProposalStatus = "applied"
	ProposalConfirmed  ProposalStatus = "confirmed"
	ProposalRolledBack ProposalStatus = "rolled_back"
	ProposalSuperseded ProposalStatus = "superseded"
	ProposalRejected   ProposalStatus = "rejected"
)

// open reports whether a proposal still awaits a decision or an outcome.
// An approved rule-only proposal is closed: if its cluster keeps failing,
// the next analysis files a new one.
func (s ProposalStatus) open() bool {
	return s == ProposalPending || s == ProposalApplied
}

// Proposal is a fix that needs a person's approval: a Tweak the strategy
// marked Review, with the evidence behind it. The loop keeps one open
// (pending or applied) proposal per agent and cluster: a new one for the
// same cluster updates a pending one's evidence and suggestion instead,
// and a suggestion rejected for the cluster is not filed again.
type Proposal struct {
	// ID is unique across processes (a UUIDv7).
	ID      string `json:"id"`
	AgentID string `json:"agent_id"`
	// Class and RootCause are those of the cluster behind it.
	Class     failure.Class     `json:"class"`
	RootCause failure.RootCause `json:"root_cause"`
	// ClusterID, Signature, Count and Examples are the evidence: the
	// cluster, its failures in the window and example messages, as of
	// Updated. Signature is at most 512 bytes; Examples are at most 2,
	// of at most 200 bytes each. A longer text is cut at a rune boundary
	// and ends with "…".
	ClusterID string   `json:"cluster_id,omitempty"`
	Signature string   `json:"signature,omitempty"`
	Count     int      `json:"count"`
	Examples  []string `json:"examples,omitempty"`
	// Config is the suggested config, nil when the proposal is a rule
	// only. Rule is a plain-text suggestion for a person, at most 512
	// bytes (cut like Signature).
	Config *Config `json:"config,omitempty"`
	Rule   string  `json:"rule,omitempty"`
	// Rationale is the strategy's reason, at most 512 bytes (cut like
	// Signature); Confidence its confidence in [0, 1].
	Rationale  string         `json:"rationale"`
	Confidence float64        `json:"confidence"`
	Status     ProposalStatus `json:"status"`
	// CostRise says the proposal applies again a change rolled back for
	// its cost alone (RollbackPolicy.ProposeCostRise): approving it
	// accepts the cost, and the change it makes is not judged on cost.
	CostRise bool `json:"cost_rise,omitempty"`
	// ChangeID names the change that applied it; Note says why it was
	// rejected, or the verdict on its change, at most 512 bytes (cut like
	// Signature). Both are empty until then.
	ChangeID string `json:"change_id,omitempty"`
	Note     string `json:"note,omitempty"`
	// Created and Updated are UTC times.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

func (p Proposal) clone() Proposal {
	if p.Config != nil {
		c := p.Config.clone()
		p.Config = &c
	}
	p.Examples = slices.Clone(p.Examples)
	return p
}

// maxProposals bounds the proposals kept per agent: the oldest closed ones
// go first, then the oldest pending ones.
const maxProposals = 16

// Proposals returns the proposals that keep reports true for (all of
// them when keep is nil), oldest first. It covers every agent with
// proposals: those in memory, and, with a Store that implements
// metaStore (FileStore and RAMStore do), those not loaded yet.
func (l *Loop) Proposals(keep func(Proposal) bool) []Proposal {
	l.loadProposalAgents()
	var out []Proposal
	l.eachAgent(func(a *agent) {
		for _, p := range a.s.Proposals {
			if keep == nil || keep(p) {
				out = append(out, p.clone())
			}
		}
	})
	slices.SortFunc(out, func(x, y Proposal) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

// Approve approves the pending proposal id. A proposal with a config goes
// through the same guard as an automatic tweak: it is applied as the
// agent's next config version and verified, and rolled back if it
// regresses; the proposal then records the outcome. It fails with
// ErrVerifying while another change is verified, and with
// ErrTweakRejected when the config was rolled back before (see
// ClearRejected) or is invalid or already current. A proposal with only
// a rule is marked approved. The outcome is saved before Approve returns;
// an approval that cannot be saved is taken back. After Close it returns
// ErrClosed.
func (l *Loop) Approve(id string) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	a, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	ch, eff, err := a.s.approve(l.clock.Now(), id, &l.rules)
	b := a.commitLocked(&eff, l.canaryCut > 0)
	a.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrTweakRejected) {
			l.m.rejectedTweaks.Add(1)
		}
		return err
	}
	if err := l.persistWait(a, nil, b); err != nil {
		if ch != nil && !isFleetErr(err) {
			// A change that cannot be recorded is not made. (The fleet's
			// errors have already put back the fleet's state.)
			a.mu.Lock()
			a.settleLocked(l.clock.Now().UnixNano())
			a.dropQueued(func(ev *Event) bool {
				return ev.Change != nil && ev.Change.ID == ch.ID || ev.Proposal != nil && ev.Proposal.ID == id
			})
			a.s.unapprove(id, ch)
			a.publishLocked(l.canaryCut > 0)
			a.mu.Unlock()
		}
		return fmt.Errorf("selfimprove: proposal not applied: %w", err)
	}
	if ch != nil {
		l.m.improvements.Add(1)
		if f, ok := fixNoteOf(ch, FixVerifying, ch.AppliedAt); ok {
			l.mem.addFix(f.cluster, f.fix)
		}
	}
	return nil
}

// Reject closes the proposal id, pending or approved with only a rule,
// with the reason. The strategy's same suggestion for the same cluster is
// not filed again. The outcome is saved before Reject returns. After
// Close it returns ErrClosed.
func (l *Loop) Reject(id, reason string) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	a, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	eff, err := a.s.reject(l.clock.Now(), id, reason, &l.rules)
	b := a.commitLocked(&eff, l.canaryCut > 0)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	l.remember(eff.fixes)
	return l.persistWait(a, nil, b)
}

// lockProposal finds proposal id and returns its agent, locked.
func (l *Loop) lockProposal(id string) (*agent, error) {
	for range 2 {
		agentID, ok := l.props.agentOf(id)
		if !ok {
			l.loadProposalAgents()
			if agentID, ok = l.props.agentOf(id); !ok {
				break
			}
		}
		a, err := l.lockAgent(nil, agentID, 0)
		if a == nil {
			return nil, err
		}
		if a.s.proposal(id) != nil {
			return a, nil
		}
		a.mu.Unlock()
		l.props.forget(id)
	}
	return nil, fmt.Errorf("%w: %s", ErrProposalNotFound, id)
}

// proposalIndex maps proposal IDs to agents, and remembers which agents
// have proposals. The list of agents is saved (through metaStore) before
// an agent's first proposal is, so that the saved list always covers
// every agent with proposals.
type proposalIndex struct {
	mu     sync.Mutex
	byID   map[string]string   // proposal ID → agent ID
	agents map[string]struct{} // agents with proposals, as saved
	loaded bool                // the saved list was read and its agents loaded
}

const proposalsDoc = "proposal-agents"

func (x *proposalIndex) agentOf(id string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	a, ok := x.byID[id]
	return a, ok
}

func (x *proposalIndex) forget(id string) {
	x.mu.Lock()
	delete(x.byID, id)
	x.mu.Unlock()
}

// note indexes agentID's proposals.
func (x *proposalIndex) note(agentID string, ps []Proposal) {
	if len(ps) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byID == nil {
		x.byID = map[string]string{}
	}
	for _, p := range ps {
		x.byID[p.ID] = agentID
	}
}

// addAgent makes sure agentID is in the saved list of agents with
// proposals.
func (l *Loop) addProposalAgent(agentID string) error {
	ms, ok := l.store.(metaStore)
	x := &l.props
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.agents == nil {
		x.agents = map[string]struct{}{}
	}
	if _, ok := x.agents[agentID]; ok {
		return nil
	}
	x.agents[agentID] = struct{}{}
	if !ok {
		return nil
	}
	ids := make([]string, 0, len(x.agents))
	for id := range x.agents {
		ids = append(ids, base64.StdEncoding.EncodeToString([]byte(id)))
	}
	slices.Sort(ids)
	data, err := json.Marshal(struct {
		Format int      `json:"format"`
		Agents []string `json:"agents_b64"`
	}{1, ids})
	if err == nil {
		err = ms.SaveMeta(proposalsDoc, data)
	}
	if err != nil {
		delete(x.agents, agentID)
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot save the list of agents with proposals", "error", err)
	}
	return err
}

// loadProposalAgents loads the agents with proposals: the saved list is
// read once, and every agent on it (or that filed one since) is loaded if
// it is not in memory.
func (l *Loop) loadProposalAgents() {
	x := &l.props
	x.mu.Lock()
	if !x.loaded {
		x.loaded = true
		if x.agents == nil {
			x.agents = map[string]struct{}{}
		}
		if ms, ok := l.store.(metaStore); ok {
			err := ms.LoadMeta(proposalsDoc, func(data []byte) error {
				var doc struct {
					Agents []string `json:"agents_b64"`
				}
				if err := json.Unmarshal(data, &doc); err != nil {
					return err
				}
				for _, b := range doc.Agents {
					raw, err := base64.StdEncoding.DecodeString(b)
					if err != nil {
						return err
					}
					x.agents[string(raw)] = struct{}{}
				}
				return nil
			})
			if err != nil && !failure.Is(err, fs.ErrNotExist) {
				l.m.storeErrors.Add(1)
				l.log.Error("selfimprove: cannot read the list of agents with proposals", "error", err)
			}
		}
	}
	ids := make([]string, 0, len(x.agents))
	for id := range x.agents {
		ids = append(ids, id)
	}
	x.mu.Unlock()
	if l.isClosed.Load() {
		return // the store is closed: list the agents in memory
	}
	for _, id := range ids {
		l.agent(id) // indexes its proposals as it loads
	}
}
