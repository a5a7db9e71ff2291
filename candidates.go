package selfimprove

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// Candidates (docs/quality.md#candidates): configs an agent may run
// under instead of its own, which the built-in strategy tries one at a
// time when success or quality falls, and which the loop explores, when
// asked to, while the agent is healthy.

// Candidate is a config an agent may move to: a prompt variant, another
// model or route, another temperature. It names only what it changes:
// its Route (when not empty) and its Params are set over the config in
// force, whose other fields (Timeout, MaxAttempts, Backoff,
// FirstTokenTimeout) and other Params stay. Give every candidate of an
// agent the same Params names, so that a move from one to another sets
// them all. A candidate that would change nothing is skipped.
type Candidate struct {
	// Name names the candidate in the reasons of the changes it leads
	// to; at most 64 bytes of UTF-8. Default: "candidate N", N its place
	// in the list from 1.
	Name string
	// Route replaces Config.Route; empty: the route stays.
	Route string
	// Params are set in Config.Params, over the entries of the same
	// names; the others stay. Within Config.Params's bounds.
	Params map[string]string
}

// maxCandidates bounds an agent's candidates; maxCandidateName a name.
const (
	maxCandidates    = 16
	maxCandidateName = 64
)

// name returns c's name, or its default for place i (from 0).
func (c *Candidate) name(i int) string {
	if c.Name != "" {
		return c.Name
	}
	return fmt.Sprintf("candidate %d", i+1)
}

// apply returns cfg with c's Route and Params set over it.
func (c *Candidate) apply(cfg Config) Config {
	next := cfg.clone()
	if c.Route != "" {
		next.Route = c.Route
	}
	if len(c.Params) > 0 {
		if next.Params == nil {
			next.Params = make(map[string]string, len(c.Params))
		}
		maps.Copy(next.Params, c.Params)
	}
	return next
}

// checkCandidates checks cs against the bounds of Candidate.
func checkCandidates(cs []Candidate) error {
	if len(cs) > maxCandidates {
		return fieldErr("candidates", "%d, more than %d", len(cs), maxCandidates)
	}
	for i := range cs {
		c, f := &cs[i], fmt.Sprintf("candidates[%d]", i)
		err := firstErr(checkText(f+".name", c.Name, maxCandidateName), checkText(f+".route", c.Route, maxRouteLen))
		if err == nil && c.Route == "" && len(c.Params) == 0 {
			err = fieldErr(f, "sets neither a route nor params")
		}
		if err == nil {
			if perr := checkParams(c.Params); perr != nil {
				err = fmt.Errorf("%s: %w", f, perr)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cloneCandidates returns a deep copy of cs (nil for none).
func cloneCandidates(cs []Candidate) []Candidate {
	if len(cs) == 0 {
		return nil
	}
	out := slices.Clone(cs)
	for i := range out {
		out[i].Params = maps.Clone(out[i].Params)
	}
	return out
}

// candidateBook holds the Loop's candidates: the default and each
// agent's own, read without a lock (an immutable map, replaced whole).
type candidateBook struct {
	def []Candidate
	mu  sync.Mutex
	per atomic.Pointer[map[string][]Candidate]
}

// of returns the agent's candidates (shared: not to be modified).
func (b *candidateBook) of(agentID string) []Candidate {
	if b == nil {
		return nil
	}
	if m := b.per.Load(); m != nil {
		if cs, ok := (*m)[agentID]; ok {
			return cs
		}
	}
	return b.def
}

// WithCandidates gives every agent the candidates cs (see Candidate),
// unless Loop.SetCandidates gives an agent its own. Default: none. New
// fails with ErrInvalidOption, naming the field, for more than 16
// candidates, a name over 64 bytes, a route or Params outside the bounds
// of Config, or a candidate that sets neither a route nor params.
func WithCandidates(cs ...Candidate) Option {
	return func(o *options) { o.candidates = cloneCandidates(cs) }
}

// SetCandidates gives agentID candidate configs of its own, in place of
// those WithCandidates sets, in the order the loop tries them; nil or
// empty removes the agent's own. The built-in strategy tries them one at
// a time, once a fall of success leaves it no safe move of its own, or
// first when the mean score falls; with WithExploration, the loop also
// explores them while the agent is healthy (docs/quality.md#candidates).
// Every move to a candidate is a change, verified on success, latency,
// quality and cost; one rolled back is refused for RollbackPolicy.
// RefuseFor (default 24 hours). The candidates live in the Loop, not in
// its store: set them again after a restart, as options are. It fails
// with ErrInvalidAgentID, or ErrInvalidOption naming the field (see
// WithCandidates).
func (l *Loop) SetCandidates(agentID string, cs []Candidate) error {
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if err := checkCandidates(cs); err != nil {
		return fmt.Errorf("%w: SetCandidates: %w", ErrInvalidOption, err)
	}
	b := &l.cands
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string][]Candidate{}
	if old := b.per.Load(); old != nil {
		maps.Copy(m, *old)
	}
	if len(cs) == 0 {
		delete(m, agentID)
	} else {
		m[agentID] = cloneCandidates(cs)
	}
	b.per.Store(&m)
	return nil
}

// Candidates returns agentID's candidates: its own (see SetCandidates),
// or the Loop's (see WithCandidates). A copy; nil when none.
func (l *Loop) Candidates(agentID string) []Candidate {
	return cloneCandidates(l.cands.of(agentID))
}

// nextCandidate returns the first of a's candidates that changes a's
// config, runs on no dead route, is within Config's bounds, and does not
// repeat a tweak refused for cluster (empty: for any): its config and
// name; ok is false when there is none.
func (a *Analysis) nextCandidate(cluster string) (cfg Config, name string, ok bool) {
	for i := range a.Candidates {
		c := &a.Candidates[i]
		next := c.apply(a.Config)
		if next.Equal(a.Config) || next.Route != a.Config.Route && a.dead(next.Route) || next.validate() != nil ||
			slices.ContainsFunc(a.Rejected, func(t Tweak) bool {
				return (cluster == "" || t.Cluster == "" || t.Cluster == cluster) && (t.Config.Equal(next) || repeats(a.Config, next, t.Config))
			}) {
			continue
		}
		return next, c.name(i), true
	}
	return Config{}, "", false
}

// candidateOr is the dominant class's answer when its own is t, a
// proposal for a person (no safe move left): the next candidate, unless
// the class is one no config of the agent's fixes.
func (p *plan) candidateOr(t *Tweak) *Tweak {
	switch p.class {
	case failure.ClassCanceled, failure.ClassPanic, failure.ClassAuth:
		return t
	}
	next, name, ok := p.a.nextCandidate(p.cl.ID)
	if !ok {
		return t
	}
	return &Tweak{Config: next, Confidence: p.share.frac(), Cluster: p.cl.ID,
		Reason: fmt.Sprintf("no safe move left for %s: candidate %q (%s)", p.class, name, p.evidence)}
}

// Exploration lets the loop try an agent's candidates (see Candidate)
// while the agent is healthy, for a better or cheaper config. The zero
// value is off.
//
// An agent with candidates is explored once it is settled: no change
// under verification, no analysis running, the failure and quality
// cooldowns over, its circuit closed and its route not held on a
// fallback, and the config in force with at least MinSamples scored
// calls, or, for an agent that scores none, calls with a cost. The loop
// then applies its next candidate (the first, in order, that is not
// current and not refused) as a change, with no strategy run, verified
// like any change, on success, latency, quality and cost; it is confirmed
// only with a gain: a cost per successful call lower by at least 10 %
// (both configs with 20 calls with a cost), a mean score significantly
// higher (the betting test of verification at 3 %), or significantly
// fewer failures. A change with none is rolled back once the quality
// test has had its say (400 scored calls, or 20 × MaxCalls calls), and
// refused, like every candidate rolled back, for RollbackPolicy.RefuseFor.
//
// The explored calls are bounded: after an exploration that ran n calls
// (or found no candidate to try, as if it ran MinSamples), the next one
// waits until the agent has made n × (1 − Share) / Share more calls, so
// that at most Share of its calls, in the long run, run a candidate under
// exploration. Under RollbackPolicy.ProposeOnly, and for an agent in
// propose-only mode (Loop.SetProposeOnly), the loop explores nothing.
type Exploration struct {
	// Share is the most share of an agent's calls that run a candidate
	// under exploration. Default 0: off; at most 0.5.
	Share float64
	// MinSamples is how many scored calls (or calls with a cost) the
	// config in force needs before the loop explores. Default 100; at
	// most 1,000,000.
	MinSamples int
}

// exploreMinSamples is Exploration.MinSamples's default.
const exploreMinSamples = 100

// exploreSaving is the least fall of the cost per successful call that
// is a gain for an explored candidate.
const exploreSaving = 0.10

func (x Exploration) validate() error {
	return firstErr(inRange("Share", x.Share, 0, 0.5), inRange("MinSamples", x.MinSamples, 0, 1_000_000))
}

func (x Exploration) withDefaults() Exploration {
	if x.MinSamples == 0 {
		x.MinSamples = exploreMinSamples
	}
	return x
}

// WithExploration turns the exploration of the agents' candidates on
// (see Exploration). Default: off. New fails with ErrInvalidOption,
// naming the field, for a Share outside [0, 0.5] or a MinSamples outside
// [0, 1,000,000].
func WithExploration(x Exploration) Option {
	return func(o *options) { o.exploration = x }
}

// exploreMark is the agent's exploration (saved in its state's
// exploration).
type exploreMark struct {
	// Version is the new version of the change that explores a
	// candidate, until its calls are counted; 0: none.
	Version int `json:"version,omitempty"`
	// Next is the agent's call count (Tracker.Total) before which it is
	// not explored.
	Next int64 `json:"next_at_call,omitempty"`
}

// exploreDue starts, at now, an exploration of the agent's candidates
// when it is due (see Exploration). It runs after a call, or a later
// score, that booked a score or a cost.
func (s *agentState) exploreDue(now time.Time, r *ruleBook, eff *effects) {
	x := &r.explore
	if !(x.Share > 0) || s.Verifying != nil || s.analyzing || eff.analysis != nil || s.Quality == nil || r.proposeOnly(s) {
		return
	}
	m := &s.Quality.Explore
	if m.Version != 0 {
		s.explored(x)
	}
	n := now.UnixNano()
	if s.Tracker.Total < m.Next || n < s.CooldownUntil || n < s.Quality.Watch.Until || s.CircuitOpenUntil != 0 || s.Route != nil && s.Route.Hold != "" {
		return
	}
	if rec := s.qualityOf(s.Config.Version); rec == nil || rec.Scored < int64(x.MinSamples) && rec.Costed < int64(x.MinSamples) {
		return
	}
	if len(r.cands.of(s.AgentID)) == 0 {
		return
	}
	th, prof := s.threshold(n)
	an := s.analysis(now, th, prof)
	an.Failures, an.Clusters, an.explore = nil, nil, true
	s.qualityOf(s.Config.Version).fill(&an.Stats)
	s.analyzing = true
	eff.th, eff.analysis = th, an
}

// explored counts the calls of the exploration decided since: the next
// waits for them to be at most Share of the agent's.
func (s *agentState) explored(x *Exploration) {
	m := &s.Quality.Explore
	calls := x.MinSamples
	for i := len(s.Changes) - 1; i >= 0; i-- {
		if ch := &s.Changes[i]; ch.To.Version == m.Version {
			calls = ch.After.Calls
			break
		}
	}
	m.Version, m.Next = 0, s.Tracker.Total+int64(math.Ceil(float64(calls)*(1-x.Share)/x.Share))
}

// exploreDone notes the outcome of the exploration an: the change ch it
// made, or none.
func (s *agentState) exploreDone(an *Analysis, ch *Change, r *ruleBook) {
	if !an.explore || s.Quality == nil {
		return
	}
	if ch != nil {
		s.Quality.Explore.Version = ch.To.Version
		return
	}
	x := &r.explore
	if x.Share > 0 {
		s.Quality.Explore.Next = s.Tracker.Total + int64(math.Ceil(float64(x.MinSamples)/x.Share))
	}
}

// explores reports whether ch explores a candidate.
func (s *agentState) explores(ch *Change) bool {
	return s.Quality != nil && s.Quality.Explore.Version != 0 && s.Quality.Explore.Version == ch.To.Version
}

// exploreTweak is the loop's answer to an exploration: the next
// candidate, nil when none.
func exploreTweak(an *Analysis) *Tweak {
	next, name, ok := an.nextCandidate("")
	if !ok {
		return nil
	}
	st := an.Stats
	return &Tweak{Config: next, Confidence: 1,
		Reason: fmt.Sprintf("exploring candidate %q while the agent is healthy (mean quality %.3f, %d scored calls; cost per successful call %.4g)",
			name, st.Quality, st.Scored, st.CostPerSuccess)}
}

// exploreVerdict takes v, a confirmation of a change that explores a
// candidate, and keeps it only with a gain (see Exploration): else it
// waits for the quality test, then rolls the change back.
func (p RollbackPolicy) exploreVerdict(e Evidence, v Verdict, waited bool) Verdict {
	b, a := e.Before, e.After
	if b.Costed >= costMinCalls && a.Costed >= costMinCalls && b.CostPerSuccess > 0 {
		if a.CostPerSuccess <= b.CostPerSuccess*(1-exploreSaving) {
			return v
		}
	} else if b.Costed >= costMinCalls && !waited {
		return Verdict{DecisionWait, ""}
	}
	n, sum, sq := scoreSums(a)
	scored := b.Scored >= qualityMinRef
	gain := verdict.GainScore(b.Calls, b.Failures, a.Calls, a.Failures)
	if w := e.Window; w.Calls > 0 {
		gain = min(gain, verdict.GainScore(w.Calls, w.Failures, a.Calls, a.Failures))
	}
	if scored && n > 0 && verdict.AboveMean(n, sum, sq, reference(b, qualityZ), qualityAlpha) ||
		b.Failures+e.Window.Failures > 0 && gain >= gainZ {
		return v
	}
	if scored && !waited && n < qualityMaxScored {
		return Verdict{DecisionWait, ""}
	}
	return Verdict{DecisionRollback, fmt.Sprintf("the explored candidate brought no gain: mean quality %.3f (%d scored calls) against %.3f (%d), cost per successful call %.4g against %.4g, success rate %.3f against %.3f",
		a.Quality, a.Scored, b.Quality, b.Scored, a.CostPerSuccess, b.CostPerSuccess, a.SuccessRate, b.SuccessRate)}
}
