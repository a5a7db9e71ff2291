package selfimprove_test

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 43, item 3: a move down the route ladder is a fix for the
// failures on the route it leaves, and is filed under their cluster.
// The primary answers every attempt with an overload; the backup answers.
// After the calls that succeeded only on the backup move the agent, the
// change names the overload's cluster; before, it named none, and the
// failure memory never learnt how the move ended.
func TestRouteMoveCreditsItsCluster(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	for i := range 60 {
		l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			clk.Advance(100 * time.Millisecond)
			if cfg.Route == "backup" && i > 0 {
				return nil
			}
			return errOverloaded // the first call fails on both routes: the memory knows the cluster
		})
		clk.Advance(10 * time.Second)
	}
	chs := l.Changes("a")
	if len(chs) == 0 {
		t.Fatalf("no change: route %q", l.Config("a").Route)
	}
	ch := chs[0]
	cls := l.Clusters("a")
	if len(cls) != 1 || ch.Cluster != cls[0].ID || ch.To.Route != "backup" || ch.State != si.ChangeConfirmed {
		t.Fatalf("change %s → route %q (%s) filed under cluster %q; want the confirmed move to backup under the overload's cluster, of %+v",
			ch.ID, ch.To.Route, ch.State, ch.Cluster, cls)
	}
	credited := false
	for _, m := range l.Similar(errOverloaded.Error(), 3) {
		for _, f := range m.Fixes {
			credited = credited || m.Cluster == ch.Cluster && f.ChangeID == ch.ID && f.State == si.FixConfirmed
		}
	}
	if !credited {
		t.Errorf("the failure memory does not credit the confirmed move to the overload's cluster: %+v", l.Similar(errOverloaded.Error(), 3))
	}
}
