package selfimprove_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestMoveOffADeadRouteSaysWhy: agent "a" meets a withdrawn model on its
// primary and marks the route dead; agent "b", on the same ladder, then
// never asks it, and moves to the backup. Its move's reason says the
// route is marked dead and the call never asked it. Before, it said "the
// last call succeeded after failing on route "primary"" of a call that
// made no request there.
func TestMoveOffADeadRouteSaysWhy(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithFlushInterval(0), si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	withdrawn := errors.New("404 The model `primary` does not exist or you do not have access to it. model_not_found")
	asked := map[string][]string{}
	for _, agent := range []string{"a", "a", "b", "b"} {
		l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
			r := cmp.Or(cfg.Route, "primary")
			asked[agent] = append(asked[agent], r)
			clk.Advance(50 * time.Millisecond)
			if r == "primary" {
				return withdrawn
			}
			return nil
		})
		clk.Advance(3 * time.Second)
	}
	if slices.Contains(asked["b"], "primary") {
		t.Fatalf("b asked the dead route: %v", asked["b"])
	}
	chs := l.Changes("b")
	if len(chs) == 0 {
		t.Fatalf("b did not move; config %+v", l.Config("b"))
	}
	if r := chs[0].Reason; strings.Contains(r, `failing on route "primary"`) || !strings.Contains(r, `route "primary" is marked dead`) {
		t.Errorf("b made no request to \"primary\" (its requests: %v), yet its move says: %s", asked["b"], r)
	}
}
