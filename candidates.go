package selfimprove

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
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

// Exploration lets the loop try an agent's candidates (see Candidate)
// while the agent is healthy, for a better or cheaper config. The zero
// value is off.
//
// An agent with candidates is explored once it is settled: no change
// under verification, no analysis running, the failure and quality
// cooldowns over, its circuit closed and its route not held on a
// fallback, no run of low scores open in the quality watch (a fall it
// has not fired on yet: the config's scores are then no reference), and
// the config in force with at least MinSamples scored
// calls, whatever the share of calls scored, or, for an agent known to
// score none (none of its calls scored, 10 × MinSamples of them with a
// cost and still none scored ScoreHorizon later, so that one that scores
// 1 % of them, or a grader that scores them late, is not taken for it), at
// least MinSamples calls with a cost. The loop
// then applies its next candidate (the first, in order, that is not
// current and not refused) as a change, with no strategy run, verified
// like any change, on success, latency, quality and cost; it is confirmed
// only with a gain: a cost per successful call lower by at least 10 %
// (both configs with 20 calls with a cost) with, when the agent scores,
// a mean score shown above the config's less 0.07 (the betting test at
// 2 %: never a saving on cost alone); a mean score significantly higher
// (the betting test of verification at 3 %); or significantly fewer
// failures. A change with none is rolled back once the quality
// test has had its say: as soon as its mean score is shown below the
// reference's (raised by a standard error) plus 0.05, a gain too small to
// wait for (the betting test at 3 %), else at 400 scored calls, or
// 20 × MaxCalls calls; and refused, like every candidate rolled back,
// for RollbackPolicy.RefuseFor. So the candidates are compared by
// successive elimination, each against the config in force, whose scored
// calls are the reference: each runs as many calls as its scores need
// (docs/quality.md#exploration, with the figures).
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
	// MinSamples is how many scored calls (or calls with a cost, for an
	// agent known to score none) the config in force needs before the
	// loop explores. Default 100; at most 1,000,000.
	MinSamples int
}

// exploreMinSamples is Exploration.MinSamples's default.
const exploreMinSamples = 100

func (x Exploration) validate() error {
	return firstErr(inRange("Share", x.Share, 0, 0.5), inRange("MinSamples", x.MinSamples, 0, 1_000_000))
}

func (x Exploration) withDefaults() Exploration {
	if x.MinSamples == 0 {
		x.MinSamples = exploreMinSamples
	}
	return x
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
	// Quiet is when the agent was first seen with calls enough with a
	// cost and none scored (Unix ns; 0: not so): it is taken for one
	// that scores none only ScoreHorizon later, as the scores of those
	// calls may still come until then.
	Quiet int64 `json:"scoreless_since_ns,omitempty"`
}
