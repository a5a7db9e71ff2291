package selfimprove

import (
	"encoding/base64"
	"encoding/json"
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

// decode adds the agents of the saved list doc to x.agents; x.mu is held.
func (x *proposalIndex) decode(data []byte) error {
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
}
