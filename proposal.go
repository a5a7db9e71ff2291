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
	Class     Class     `json:"class"`
	RootCause RootCause `json:"root_cause"`
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

// Errors of the proposal methods.
var (
	// ErrProposalNotFound: no proposal has the ID.
	ErrProposalNotFound = errors.New("selfimprove: no such proposal")
	// ErrProposalState: the proposal is not in a state that allows the
	// action (for example, approving one that was rejected).
	ErrProposalState = errors.New("selfimprove: proposal cannot take this action in its state")
	// ErrVerifying: the agent has a change under verification; approve
	// again once it is decided.
	ErrVerifying = errors.New("selfimprove: a change is under verification")
)

// maxProposals bounds the proposals kept per agent: the oldest closed ones
// go first, then the oldest pending ones.
const maxProposals = 16

// fileLocked files tw as a proposal for a, or folds it into the open
// proposal for the same cluster. It returns the proposal and whether it
// is new. a.mu is held.
func (l *Loop) fileLocked(a *agent, an *Analysis, tw *Tweak, now time.Time) (*Proposal, bool) {
	s := &a.s
	var cl *Cluster
	for i := range an.Clusters {
		if an.Clusters[i].ID == tw.Cluster {
			cl = &an.Clusters[i]
		}
	}
	if cl == nil && len(an.Clusters) > 0 {
		cl = &an.Clusters[0]
	}
	var suggest *Config
	if !tw.Config.Equal(s.Config) {
		c := tw.Config.clone()
		c.Version = 0
		suggest = &c
	}
	p := Proposal{
		AgentID: a.id, Rule: boundText(tw.Rule, maxReason), Config: suggest, Rationale: boundText(tw.Reason, maxReason),
		Confidence: min(max(tw.Confidence, 0), 1), Status: ProposalPending, Updated: now.UTC(),
	}
	if cl != nil {
		p.Class, p.RootCause, p.ClusterID, p.Signature = cl.Class, cl.RootCause, cl.ID, boundText(cl.Signature, maxReason)
		p.Count, p.Examples = cl.Count, boundTexts(cl.Examples, maxExample, maxErrText)
	}
	same := func(q *Proposal) bool {
		return q.ClusterID == p.ClusterID && q.Rule == p.Rule &&
			(q.Config == nil) == (p.Config == nil) && (q.Config == nil || q.Config.Equal(*p.Config))
	}
	for i := range s.Proposals {
		q := &s.Proposals[i]
		if q.ClusterID != p.ClusterID {
			continue
		}
		switch {
		case q.Status == ProposalPending:
			// New evidence, and the newer suggestion.
			q.Count, q.Examples, q.Updated = p.Count, p.Examples, p.Updated
			q.Config, q.Rule, q.Rationale, q.Confidence, q.Class, q.RootCause = p.Config, p.Rule, p.Rationale, p.Confidence, p.Class, p.RootCause
			return q, false
		case q.Status.open(), q.Status == ProposalRejected && same(q):
			// Being acted on, or the same suggestion was turned down.
			return q, false
		}
	}
	p.ID, p.Created = newID(now), now.UTC()
	s.Proposals = append(s.Proposals, p)
	if len(s.Proposals) > maxProposals {
		i := slices.IndexFunc(s.Proposals, func(q Proposal) bool { return !q.Status.open() })
		if i < 0 {
			i = slices.IndexFunc(s.Proposals, func(q Proposal) bool { return q.Status == ProposalPending })
		}
		if i >= 0 {
			s.Proposals = slices.Delete(s.Proposals, i, i+1)
		} else {
			s.Proposals = s.Proposals[1:]
		}
	}
	return &s.Proposals[len(s.Proposals)-1], true
}

// proposalLocked returns a's proposal with the ID, or nil.
func (s *agentState) proposalLocked(id string) *Proposal {
	for i := range s.Proposals {
		if s.Proposals[i].ID == id {
			return &s.Proposals[i]
		}
	}
	return nil
}

// closeProposalLocked records the outcome of a change on the proposal that
// made it, if any.
func (s *agentState) closeProposalLocked(ch *Change, now time.Time) {
	if ch.ProposalID == "" {
		return
	}
	p := s.proposalLocked(ch.ProposalID)
	if p == nil {
		return
	}
	switch ch.State {
	case ChangeConfirmed:
		p.Status = ProposalConfirmed
	case ChangeRolledBack:
		p.Status = ProposalRolledBack
	case ChangeSuperseded:
		p.Status = ProposalSuperseded
	default:
		return
	}
	p.Note, p.Updated = ch.Verdict, now.UTC()
}

// Proposals returns the proposals that keep reports true for (all of
// them when keep is nil), oldest first. It covers every agent with
// proposals: those in memory, and, with a Store that implements
// MetaStore (FileStore and MemoryStore do), those not loaded yet.
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
// a rule is marked approved. The outcome is saved before Approve returns.
// After Close it returns ErrClosed.
func (l *Loop) Approve(id string) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	a, p, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	now := l.clock.Now()
	if p.Status != ProposalPending {
		a.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrProposalState, id, p.Status)
	}
	if p.Config == nil {
		p.Status, p.Updated = ProposalApproved, now.UTC()
		a.queueLocked(l.proposalEvent(EventProposalApproved, p, now))
		a.mu.Unlock()
		return l.persist(a)
	}
	if a.s.Verifying != nil {
		a.mu.Unlock()
		return fmt.Errorf("%w: approve %s after change %s is decided", ErrVerifying, id, a.s.Verifying.ID)
	}
	an := &Analysis{Config: a.s.Config, Stats: l.statsLocked(a, now.UnixNano())}
	ch, err := l.applyLocked(a, an, &Tweak{Config: *p.Config, Reason: "approved proposal: " + p.Rationale, Cluster: p.ClusterID}, now)
	if err != nil {
		a.mu.Unlock()
		return err
	}
	a.s.Verifying.ProposalID, ch.ProposalID = p.ID, p.ID
	p.Status, p.ChangeID, p.Updated = ProposalApplied, ch.ID, now.UTC()
	a.queueLocked(l.proposalEvent(EventProposalApproved, p, now))
	ev := a.queueLocked(l.newEvent(EventImprovementApplied, a.id, ch))
	a.mu.Unlock()
	if err := l.persist(a); err != nil {
		// A change that cannot be recorded is not made.
		a.mu.Lock()
		a.pending = slices.DeleteFunc(a.pending, func(q queued) bool { return q.ev == ev || q.ev.Proposal != nil && q.ev.Proposal.ID == id })
		if v := a.s.Verifying; v != nil && v.ID == ch.ID {
			a.s.endVerify()
			a.installLocked(l, ch.From.clone())
			a.s.History = a.s.History[:len(a.s.History)-1]
		}
		if p := a.s.proposalLocked(id); p != nil {
			p.Status, p.ChangeID = ProposalPending, ""
		}
		a.mu.Unlock()
		return fmt.Errorf("selfimprove: proposal not applied: %w", err)
	}
	l.m.improvements.Add(1)
	l.rememberFix(ch, FixVerifying, ch.AppliedAt)
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
	a, p, err := l.lockProposal(id)
	if err != nil {
		return err
	}
	if p.Status != ProposalPending && !(p.Status == ProposalApproved && p.Config == nil) {
		a.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrProposalState, id, p.Status)
	}
	now := l.clock.Now()
	p.Status, p.Note, p.Updated = ProposalRejected, boundText(reason, maxReason), now.UTC()
	a.queueLocked(l.proposalEvent(EventProposalRejected, p, now))
	if p.Config != nil && p.ClusterID != "" {
		l.mem.addFix(p.ClusterID, Fix{AgentID: a.id, ProposalID: p.ID, From: a.s.Config.clone(), To: p.Config.clone(),
			Reason: p.Rationale, State: FixRejected, Time: now.UTC()})
	}
	a.mu.Unlock()
	return l.persist(a)
}

// lockProposal finds proposal id and returns its agent, locked.
func (l *Loop) lockProposal(id string) (*agent, *Proposal, error) {
	for range 2 {
		agentID, ok := l.props.agentOf(id)
		if !ok {
			l.loadProposalAgents()
			if agentID, ok = l.props.agentOf(id); !ok {
				break
			}
		}
		a, err := l.lockAgent(nil, agentID)
		if a == nil {
			return nil, nil, err
		}
		if p := a.s.proposalLocked(id); p != nil {
			return a, p, nil
		}
		a.mu.Unlock()
		l.props.forget(id)
	}
	return nil, nil, fmt.Errorf("%w: %s", ErrProposalNotFound, id)
}

func (l *Loop) proposalEvent(t EventType, p *Proposal, now time.Time) *Event {
	c := p.clone()
	e := &Event{ID: newID(now), Time: now.UTC(), Type: t, AgentID: p.AgentID, Proposal: &c}
	switch t {
	case EventProposalFiled:
		e.Message = fmt.Sprintf("agent %q: proposal %s for review (%s): %s", p.AgentID, p.ID, p.Class, p.Rationale)
	case EventProposalApproved:
		e.Message = fmt.Sprintf("agent %q: proposal %s approved", p.AgentID, p.ID)
	case EventProposalRejected:
		e.Message = fmt.Sprintf("agent %q: proposal %s rejected: %s", p.AgentID, p.ID, p.Note)
	}
	return e
}

// MetaStore is implemented by a Store that also keeps small loop-wide
// documents. The loop keeps there the list of agents that have proposals,
// so that Proposals and Approve find them after a restart before the
// agents are loaded. FileStore (as <dir>/<name>.json) and MemoryStore
// implement it.
type MetaStore interface {
	// LoadMeta reads the document name and passes it to decode; it
	// returns an error wrapping fs.ErrNotExist when there is none.
	LoadMeta(name string, decode func(doc []byte) error) error
	// SaveMeta replaces the document name, atomically and durably.
	SaveMeta(name string, doc []byte) error
}

// proposalIndex maps proposal IDs to agents, and remembers which agents
// have proposals. The list of agents is saved (through MetaStore) before
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
	ms, ok := l.store.(MetaStore)
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
		if ms, ok := l.store.(MetaStore); ok {
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
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
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
