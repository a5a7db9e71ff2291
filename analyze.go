package selfimprove

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Strategy proposes a config change for an agent whose failures crossed its
// threshold. The loop calls Analyze at most once at a time per agent, then
// starts the agent's cooldown whatever the answer. A nil Tweak means "no
// change". Analyze must honour ctx, which carries the loop's strategy
// deadline (WithStrategyTimeout); an answer that comes after the deadline
// is discarded. An error or a panic is recovered, logged and counted, and
// never affects the wrapped call.
type Strategy interface {
	Analyze(ctx context.Context, a Analysis) (*Tweak, error)
}

// StrategyFunc adapts a function to the Strategy interface.
type StrategyFunc func(ctx context.Context, a Analysis) (*Tweak, error)

// Analyze calls f(ctx, a).
func (f StrategyFunc) Analyze(ctx context.Context, a Analysis) (*Tweak, error) { return f(ctx, a) }

// Analysis is the evidence a Strategy gets. It is a copy: the strategy may
// keep or modify it.
type Analysis struct {
	// AgentID is the agent whose failures crossed its threshold.
	AgentID string
	// Config is the agent's current config.
	Config Config
	// Stats are the agent's stats over its analysis window.
	Stats Stats
	// Threshold is the threshold that was crossed.
	Threshold Threshold
	// Failures are the most recent failures in the window (up to 16),
	// oldest first.
	Failures []Failure
	// Clusters are the agent's failure clusters with failures in the
	// window, most failures first. A cluster with From set holds failures
	// passed on from a call nested in the agent's: that call's agent owns
	// them.
	Clusters []Cluster
	// Trigger is the ID of the cluster the analysis is for: the cluster
	// of most of the failures under the current config that called for
	// it (on a tie, the failure that crossed the threshold), or the one
	// cluster an early analysis holds. A Tweak without a Cluster is
	// filed under it, and the failure memory credits the fix to it.
	// Empty when a fall of quality started the analysis, or for an
	// analysis no failure started; then the largest of Clusters (From
	// empty) stands in.
	Trigger string
	// When a new kind of fault ends a cooldown early (see
	// RollbackPolicy), Failures and Clusters hold that kind only: the
	// analysis is about the new fault, not the one the cooldown was for.
	// Health is the agent's recency-weighted success rate (see
	// Loop.Health).
	Health float64
	// Shared are the shared causes (see Loop.SharedCauses) this agent is
	// part of.
	Shared []SharedCause
	// Rejected are the tweaks rolled back for this agent and still
	// refused, oldest first. The loop does not apply one of them again,
	// nor a tweak that repeats one (every field it changes among Timeout,
	// MaxAttempts, Backoff, Route and Params takes the rolled-back value),
	// for the same cluster (either without one: for any), until its Until
	// or ClearRejected.
	Rejected []Tweak
	// Routes is the agent's route ladder (see Routes), and DeadRoutes
	// the routes dead at Time, for the agent or the whole Loop, by route.
	Routes     Routes
	DeadRoutes []DeadRoute
	// TransientAttempts is the fewest attempts a call makes for
	// transient failures (rate_limit, overloaded, timeout, network) and
	// bad outputs whatever its config (RetryPolicy.TransientAttempts): a MaxAttempts
	// at or below it changes nothing for them.
	TransientAttempts int
	// FirstToken is the histogram of the agent's times to first token
	// since it was loaded (AgentView.FirstToken): how soon its streams
	// begin when they do not stall.
	FirstToken Histogram
	// QualityDrop, when a fall of the mean score started the analysis
	// rather than failures (see RollbackPolicy.QualityDrop), holds the
	// scores that fell (Scored, Quality, QualitySD; zero otherwise), and
	// Stats the config's scores in all; Failures and Clusters are then
	// empty.
	QualityDrop Stats
	// Candidates are the agent's candidate configs, in the order to try
	// them (see Loop.SetCandidates).
	Candidates []Candidate
	// Memories are the remembered failure clusters most similar to the
	// Trigger's cluster (see Loop.Similar), best
	// first, at most 5, with the fixes tried for them on every agent and
	// how each ended.
	Memories []Memory
	// Time is when the analysis started.
	Time time.Time

	explore bool // the loop explores the candidates (see Exploration): no strategy runs
}

// Tweak is a proposed config: the whole config to run under, not a diff.
// The loop assigns its Version.
//
// The loop refuses, with an error wrapping ErrTweakRejected (and
// ErrInvalidConfig for the config) that names the field, a tweak whose
// Config is outside the bounds of Config, or whose Cluster is not a
// cluster ID; it cuts the texts and clamps Confidence instead.
//
// With Review set, the loop does not apply it: it files a Proposal for a
// person to approve (see Loop.Approve). A reviewed Tweak whose Config
// equals the current config proposes its Rule only.
type Tweak struct {
	Config Config `json:"config"`
	// Reason says why, in plain text. The loop keeps at most 512 bytes of
	// it (in the Change, the rejected tweaks, the failure memory and a
	// Proposal's Rationale): a longer one is cut at a rune boundary and
	// ends with "…". Default empty.
	Reason string `json:"reason"`
	// Review asks for human approval instead of applying the tweak.
	Review bool `json:"review,omitempty"`
	// Rule is a plain-text suggestion for a person (a prompt change, a
	// quota to raise), filed with a reviewed tweak; cut like Reason to
	// 512 bytes. Default empty.
	Rule string `json:"rule,omitempty"`
	// Confidence is the strategy's confidence in the tweak, in [0, 1]
	// (clamped to it).
	Confidence float64 `json:"confidence,omitempty"`
	// Cluster is the ID of the cluster the tweak addresses (16 lower-case
	// hex digits, as Cluster.ID); default Analysis.Trigger (or, without
	// one, the largest of Analysis.Clusters).
	Cluster string `json:"cluster,omitempty"`
	// Until is, for a tweak in Analysis.Rejected, when the loop stops
	// refusing it (see RollbackPolicy.RefuseFor); zero: until
	// ClearRejected. The loop ignores it in a strategy's answer.
	Until time.Time `json:"until,omitzero"`
	// Explored marks, in Analysis.Rejected, a candidate an exploration
	// rolled back for bringing no gain over the config while the agent
	// was healthy (not for harm): the loop refuses it to explorations
	// only, and a fall of success or quality may still be answered with
	// it (a candidate a little worse than the healthy config may repair
	// the fallen one). The loop ignores it in a strategy's answer.
	// Default false.
	Explored bool `json:"explored,omitempty"`
}

// qualityWatchReason is the figures of the strategy's reason for a fall
// of quality (the reason starts with the move, in plain words: see
// qualityAnswer); no earlier mean where none was scored.
func qualityWatchReason(a *Analysis) string {
	if a.Stats.Scored == 0 {
		return fmt.Sprintf("mean quality fell to %.3f (%d scored calls), no earlier figure", a.QualityDrop.Quality, a.QualityDrop.Scored)
	}
	return fmt.Sprintf("mean quality fell to %.3f (%d scored calls) from %.3f (%d in all)",
		a.QualityDrop.Quality, a.QualityDrop.Scored, a.Stats.Quality, a.Stats.Scored)
}

// dead reports whether route is among the analysis's dead routes.
func (a *Analysis) dead(route string) bool {
	return slices.ContainsFunc(a.DeadRoutes, func(d DeadRoute) bool { return d.Route == route })
}
