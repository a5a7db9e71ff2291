package selfimprove_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

type countCommits struct {
	si.Fleet
	n *atomic.Int64
}

func (c countCommits) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	c.n.Add(1)
	return c.Fleet.Commit(ctx, id, rev, v)
}

// TestAnsweredSendsNoFleetCommit: a replica's split of its calls by the
// route that answered them (issue 41, item 6) stays its own, like its
// records per version: calls half answered by the fallback send no commit
// to the fleet (1 before: the split was in the shared state) and keep the
// split after the replica syncs.
func TestAnsweredSendsNoFleetCommit(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		e := newFleetEnv(t, 0, nil, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}), si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
		var n atomic.Int64
		l := e.addVia(countCommits{e.mem, &n})
		e.add()
		e.sync()
		n.Store(0)
		up := errors.New("503 service unavailable")
		for i := range 20 {
			l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
				e.clk.Advance(10 * time.Millisecond)
				si.AddCost(ctx, 1)
				if fallback && i%2 == 0 && c.Route != "backup" {
					return up
				}
				return nil
			})
			e.sync()
		}
		v, _ := l.View("a")
		l.Close()
		if got := n.Load(); got != 0 {
			t.Errorf("fallback %v: the replica's saves sent %d commits, want 0 (its split by the answering route is its own, not the fleet's)", fallback, got)
		}
		if want := map[bool]int{false: 0, true: 10}[fallback]; v.Routes["backup"].Costed != want {
			t.Errorf("fallback %v: route backup costed %d calls, want %d: %+v", fallback, v.Routes["backup"].Costed, want, v.Routes)
		}
	}
}
