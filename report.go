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
