package selfimprove_test

import (
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 43, item 6: the verdict of a move kept because rolling it back
// would return to a dead route, with no live route left, starts with
// what happened in plain words. The primary is withdrawn ("no such
// model") and the only fallback keeps failing.
func TestKeptMoveVerdictPlainFirst(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	up := func(route string) error {
		if route == "" || route == "primary" {
			return errGone
		}
		return err503
	}
	callEvery(l, clk, "a", 6*60, time.Minute, up)
	var verdicts []string
	for _, ch := range l.Changes("a") {
		verdicts = append(verdicts, string(ch.State)+" "+ch.To.Route+": "+ch.Verdict)
		if ch.State == si.ChangeConfirmed && strings.HasPrefix(ch.Verdict, `kept, though it fails: rolling back would return to route "primary", which is dead, and no live route is left; `) {
			return
		}
	}
	t.Errorf("no move kept with a plain first sentence among the changes:\n%s", strings.Join(verdicts, "\n"))
}
