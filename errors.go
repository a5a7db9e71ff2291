package selfimprove

import (
	"errors"
	"strings"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// The package's errors. The loop wraps them with context, so test for them
// with errors.Is. The errors of the loop's own machinery never replace the
// wrapped call's error: they come back in Report.LoopErr, or from the
// Loop's methods.
var (
	// Wrong inputs: an option, a call, an operator's action.

	// ErrInvalidOption is returned (wrapped, with the option's name and
	// the field's) by New for an option outside its documented range, and
	// by SetRoutes.
	ErrInvalidOption = errors.New("selfimprove: invalid option")
	// ErrNilFunc is returned by ExecuteWithImprovement and Execute for a nil
	// fn; nothing is run or recorded.
	ErrNilFunc = errors.New("selfimprove: nil function")
	// ErrInvalidAgentID is returned (wrapped) for an empty agent ID or one
	// longer than MaxAgentIDLen: by the Loop's methods, and in
	// Report.LoopErr by a call, which still runs fn, untracked, under the
	// default config, and is logged (see ExecuteWithImprovement).
	ErrInvalidAgentID = errors.New("selfimprove: invalid agent ID")
	// ErrInvalidConfig is returned (wrapped, naming the field) for a Config
	// with a field outside its bound (see Config), or a Version the caller
	// set.
	ErrInvalidConfig = errors.New("selfimprove: invalid config")
	// ErrInvalidThreshold is returned (wrapped, naming the field) by
	// SetThreshold for a Threshold field outside its bound.
	ErrInvalidThreshold = errors.New("selfimprove: invalid threshold")
	// ErrInvalidScore is returned (wrapped) by Loop.Score and
	// Loop.AddScore for a score that is NaN or outside [0, 1]; nothing is
	// recorded.
	ErrInvalidScore = errors.New("selfimprove: invalid score")
	// ErrUnknownCall is returned (wrapped) by Loop.Score for a call ID the
	// agent cannot place: malformed, from the future, or under a config
	// version it no longer keeps; and by Loop.AddScore for a context that
	// belongs to no call. Nothing is recorded.
	ErrUnknownCall = errors.New("selfimprove: unknown call")
	// ErrScoreTooLate is returned (wrapped) by Loop.Score for a call that
	// ended more than ScoreHorizon ago, and by Loop.AddScore for a call
	// already booked (a context kept after fn returned); nothing is
	// recorded.
	ErrScoreTooLate = errors.New("selfimprove: score too late")
	// ErrUnknownVersion is returned by Rewind for a version the agent's
	// history no longer holds (or never had), and for an agent with no
	// history (no call, no saved state).
	ErrUnknownVersion = errors.New("selfimprove: no such config version")
	// ErrProposalNotFound: no proposal has the ID.
	ErrProposalNotFound = errors.New("selfimprove: no such proposal")
	// ErrProposalState: the proposal is not in a state that allows the
	// action (for example, approving one that was rejected).
	ErrProposalState = errors.New("selfimprove: proposal cannot take this action in its state")
	// ErrVerifying: the agent has a change under verification; approve
	// again once it is decided.
	ErrVerifying = errors.New("selfimprove: a change is under verification")
	// ErrFiledForApproval is returned (wrapped, naming the proposal) by
	// Loop.Try for a propose-only agent: the config was filed as a
	// pending Proposal, which Approve applies; nothing else changed.
	ErrFiledForApproval = errors.New("selfimprove: filed for approval")

	// The loop's state, and its own machinery: the strategy, traces,
	// notifications, subscriptions.

	// ErrClosed: the Loop was closed. Calls still run fn, untracked.
	ErrClosed = errors.New("selfimprove: loop closed")
	// ErrBudgetSpent is returned, without running fn or recording the
	// call, by a call whose Budget (WithBudget) was spent before its first
	// attempt; Report.BudgetExhausted is set and Report.Attempts is 0. A
	// task's function that passes a step's error on (wrapped or not) keeps
	// it testable with errors.Is.
	ErrBudgetSpent = errors.New("selfimprove: budget spent: the call made no attempt")
	// ErrCircuitOpen is returned, without running fn, by a call of an agent
	// whose circuit is open (see CircuitBreaker).
	ErrCircuitOpen = errors.New("selfimprove: circuit open")
	// ErrStrategyTimeout: the strategy did not answer within its timeout;
	// a late answer is discarded.
	ErrStrategyTimeout = errors.New("selfimprove: strategy timed out")
	// ErrStrategyPanic: the strategy panicked; the panic was recovered.
	ErrStrategyPanic = errors.New("selfimprove: strategy panicked")
	// ErrStorePanic: a method of the Store (WithStore) panicked; the panic
	// was recovered and the operation failed, as if the method had
	// returned this error (wrapped, naming the method and the panic).
	ErrStorePanic = errors.New("selfimprove: store panicked")
	// ErrStoreSlow is returned (wrapped, in Report.LoopErr) by a call
	// whose agent the store had not loaded within a second (its first call
	// in this process, while LoadAgent hangs), or while 1,024 loads hang:
	// fn ran untracked under the default config, and the load goes on in
	// the background, for the calls after it.
	ErrStoreSlow = errors.New("selfimprove: store slow: the agent is still loading")
	// ErrTweakRejected: the strategy proposed a tweak the loop will not
	// apply (one rolled back before, the current config, or invalid).
	ErrTweakRejected = errors.New("selfimprove: tweak not applied")
	// ErrStale: the agent's config changed while the strategy ran, so its
	// tweak was not applied.
	ErrStale = errors.New("selfimprove: config changed during analysis")
	// ErrTraceDropped is returned (wrapped, in Report.LoopErr) when a call's
	// trace could not be handed to the writer within the wait bound
	// (WithTraceQueue), or could not be written. Metrics.TracesDropped counts
	// such traces; they are also logged.
	ErrTraceDropped = errors.New("selfimprove: trace dropped")
	// ErrNotifyQueueFull is logged (wrapped) when an event is dropped because
	// the notifier queue is full; Metrics.NotifyDropped counts such drops.
	ErrNotifyQueueFull = errors.New("selfimprove: notifier queue full")
	// ErrSubscriberBehind ends a Subscription whose reader fell behind: its
	// buffer was full when an event came. The events after that one were not
	// delivered to it; a new Subscribe with the last event's ID resumes from
	// the recent events.
	ErrSubscriberBehind = errors.New("selfimprove: event subscriber fell behind")

	// Stores.

	// ErrLocked is returned (wrapped) by New when another Loop, in this process
	// or another, has the state directory open.
	ErrLocked = errors.New("selfimprove: state directory is in use by another Loop")
	// ErrReadOnly is returned (wrapped) by every write to a ReadOnlyStore.
	ErrReadOnly = errors.New("selfimprove: read-only store")
	// ErrCorruptState is reported (wrapped, in Report.LoopErr and the log) when
	// an agent's state file cannot be parsed, belongs to another agent ID, is
	// too large or is not a regular file (a link, a pipe). The file is renamed
	// aside with a ".corrupt-<time>" suffix and the agent starts afresh;
	// nothing is overwritten. A FileStore's loop-wide documents (the failure
	// memory, the list of agents with proposals) are set aside alike.
	ErrCorruptState = errors.New("selfimprove: corrupt agent state")

	// A Fleet's. The loop never returns them from a wrapped call: a call
	// keeps running under the last config it knows.

	// ErrFleetConflict: another replica committed first; the loop takes
	// its state.
	ErrFleetConflict = replica.ErrConflict
	// ErrFleetUnavailable: the fleet could not be reached; nothing new
	// is applied until it can be.
	ErrFleetUnavailable = replica.ErrUnavailable
)

// optionErr is ErrInvalidOption for the option (or method) name, because
// of err: it wraps both, and its text names the package once
// ("selfimprove: invalid option: WithDefaultConfig: invalid config: ...",
// not "...: selfimprove: invalid config: ...").
func optionErr(name string, err error) error {
	return &twoErr{msg: ErrInvalidOption.Error() + ": " + name + ": " + strings.TrimPrefix(err.Error(), "selfimprove: "),
		errs: [2]error{ErrInvalidOption, err}}
}

// twoErr is an error of its own text that wraps two.
type twoErr struct {
	msg  string
	errs [2]error
}

func (e *twoErr) Error() string   { return e.msg }
func (e *twoErr) Unwrap() []error { return e.errs[:] }
