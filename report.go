package selfimprove

import (
	"fmt"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// String returns r on one line, for logs: the outcome, the attempts and
// the time they took, the config version the call ran under, fn's error,
// and what the loop did during the call (a change applied, rolled back or
// confirmed, the version in force after it). Error texts and reasons are
// scrubbed of secrets (failure.Scrub) and cut, as the loop stores them.
//
//	failed: 3 attempts in 1.5s under v1: "503 service unavailable"; applied v2 (overloaded: attempts 1 → 2)
func (r Report) String() string {
	var b strings.Builder
	switch {
	case r.Success:
		b.WriteString("ok")
	case r.Ignored:
		b.WriteString("ignored (the caller's context ended)")
	default:
		b.WriteString("failed")
	}
	s := "s"
	if r.Attempts == 1 {
		s = ""
	}
	fmt.Fprintf(&b, ": %d attempt%s in %v under v%d", r.Attempts, s, r.Duration.Round(time.Microsecond), r.ConfigVersion)
	if r.Arm != ArmNone {
		fmt.Fprintf(&b, " (canary %s arm)", r.Arm)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, ": %q", failure.Text(r.Err))
	}
	if r.BudgetExhausted {
		b.WriteString("; budget spent")
	}
	noted := false
	if c := r.Improvement; c != nil {
		fmt.Fprintf(&b, "; applied v%d (%s)", c.To.Version, reportText(c.Reason))
		noted = c.To.Version == r.Version
	}
	if c := r.Rollback; c != nil {
		fmt.Fprintf(&b, "; rolled back v%d to v%d (%s)", c.To.Version, c.From.Version, reportText(c.Verdict))
		noted = c.From.Version == r.Version
	}
	if c := r.Confirmed; c != nil {
		fmt.Fprintf(&b, "; confirmed v%d", c.To.Version)
	}
	if !noted && r.Version != r.ConfigVersion && r.Version != 0 {
		fmt.Fprintf(&b, "; now v%d", r.Version)
	}
	if r.LoopErr != nil {
		fmt.Fprintf(&b, "; loop: %s", failure.Text(r.LoopErr))
	}
	return b.String()
}

// reportText is a reason or verdict as Report.String shows it: scrubbed,
// and cut to 160 bytes.
func reportText(s string) string { return failure.Bound(failure.Scrub(s), 160) }

// Arm is the arm of a canary verification a call ran in.
type Arm uint8

// The arms.
const (
	ArmNone    Arm = iota // no canary verification was under way
	ArmChange             // the call ran the config under verification
	ArmControl            // the call ran the config before it
)

// String returns "", "change" or "control".
func (a Arm) String() string {
	switch a {
	case ArmNone:
		return ""
	case ArmChange:
		return "change"
	case ArmControl:
		return "control"
	}
	return fmt.Sprintf("Arm(%d)", int(a))
}

// Report says what one ExecuteWithImprovement call did.
//
// Its fields are laid out so that its size stays a multiple of 16 bytes
// (see TestReportSize).
type Report struct {
	// Success reports whether fn finally returned nil.
	Success bool
	// Ignored reports that the call was not counted because the caller's
	// own context ended (cancelled or past its deadline) before fn
	// succeeded: that is the caller's choice, not the agent's failure.
	Ignored bool
	// ImprovementTriggered reports that this call's failure crossed the
	// agent's threshold and the strategy ran (or, with no strategy, would
	// have run).
	ImprovementTriggered bool
	// BudgetExhausted reports that retries stopped because the call's
	// Budget was spent, or, with Attempts 0, that the call was refused
	// before its first attempt (see Budget).
	BudgetExhausted bool
	// Arm is the arm of a canary verification (MethodCanary) the call ran
	// in: ArmChange under the change being verified, ArmControl under the
	// config before it. It is ArmNone when no canary verification was
	// under way. The call is credited to its arm's version.
	Arm Arm
	// Err is fn's final error, unchanged (nil on success).
	Err error
	// Duration is the whole call: every attempt and the waits between.
	Duration time.Duration
	// Attempts is how many times fn ran: 0 for a call refused by an open
	// circuit or a spent Budget.
	Attempts int
	// ConfigVersion is the version of the config fn ran under.
	ConfigVersion int
	// Version is the version of the agent's config in force when the call
	// returned: the new one when this call applied a change (Improvement)
	// or rolled one back (Rollback), else the version in force when it
	// began, which is ConfigVersion except on a canary's control arm.
	Version int
	// Improvement is the change applied during this call, else nil. It is
	// also nil when the caller's context ended while the strategy was
	// still running; the change then lands later, with its event.
	Improvement *Change
	// Rollback is the change rolled back during this call, else nil.
	Rollback *Change
	// Confirmed is the change whose verification passed during this call,
	// else nil.
	Confirmed *Change
	// ID names the call for Loop.Score (CallID is its text form): its
	// config version and the millisecond it ended, with a check keyed by
	// the agent (docs/quality.md). Two calls that end in
	// the same millisecond under the same version share it, and a score
	// of either counts for that version alike. 0 for an untracked call,
	// and for one its caller cancelled (Ignored), which is not booked.
	ID uint64
	// LoopErr is an error of the loop's own machinery during this call
	// (storage, strategy), never fn's. The call's result stands regardless.
	LoopErr error
	// Cost is the cost the call reported with AddCost, over its attempts;
	// 0 when it reported none. Record books it for a call that ran
	// elsewhere.
	Cost float64
}

// CallID returns r.ID as Loop.Score's HTTP form takes it: 16 hex digits.
func (r Report) CallID() string { return fmt.Sprintf("%016x", r.ID) }
