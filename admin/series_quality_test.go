package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestSeriesQuality: a point of the timeline carries the mean of the
// scores booked in its slot (by Loop.Score, minutes after the call, or
// AddScore inside it) and the cost of the calls booked in it per
// successful one, also when the slot was sampled by the overview (every
// agent); an agent with neither has no such fields.
func TestSeriesQuality(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	call := func(id string, cost float64, fail bool, score float64) uint64 {
		return costedCall(t, l, clk, id, cost, fail, score)
	}
	start := clk.Now().Truncate(time.Minute)
	clk.Advance(start.Add(time.Minute).Sub(clk.Now()))
	var late []uint64
	for m := range 5 {
		for i := range 10 {
			switch m {
			case 0: // every call scored 0.8 inside it, cost 1, all succeed
				call("q", 1, false, 0.8)
			case 1: // no score inside; cost 2, one failure: 20 / 9
				late = append(late, call("q", 2, i == 0, -1))
			case 2: // minute 1's calls scored now, 0.5 and 0.3: booked in this minute
				call("q", 0, false, -1)
				if err := l.Score("q", late[i], 0.5-0.2*float64(i%2)); err != nil {
					t.Fatalf("Score: %v", err)
				}
			case 3: // neither
				call("q", 0, false, -1)
			case 4: // scored 1 inside, sampled by the overview's sample of every agent
				call("q", 0, false, 1)
			}
			call("calm", 0, false, -1)
		}
		if m == 4 {
			httptestGet(h, "/api/overview")
		} else {
			httptestGet(h, "/api/agents/q/series?range=hour")
			httptestGet(h, "/api/agents/calm/series?range=hour")
		}
		clk.Advance(time.Minute - 600*time.Millisecond)
	}
	var s admin.Series
	if err := json.Unmarshal([]byte(httptestGet(h, "/api/agents/q/series?range=hour")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 6 { // and the minute of the read
		t.Fatalf("%d points: %+v", len(s.Points), s.Points)
	}
	type q struct {
		scored  int
		quality float64
		costed  int
		cps     float64 // -1: none
	}
	for m, want := range []q{{10, 0.8, 10, 1}, {0, 0, 10, 20.0 / 9}, {10, 0.4, 0, -1}, {0, 0, 0, -1}, {10, 1, 0, -1}, {0, 0, 0, -1}} {
		p := s.Points[m]
		cps := -1.0
		if p.CostPerSuccess != nil {
			cps = *p.CostPerSuccess
		}
		if got := (q{p.Scored, p.Quality, p.Costed, cps}); !near(got.quality, want.quality) || !near(got.cps, want.cps) || got.scored != want.scored || got.costed != want.costed {
			t.Errorf("minute %d: %+v, want %+v", m, got, want)
		}
	}
	b := httptestGet(h, "/api/agents/calm/series?range=hour")
	if strings.Contains(b, "quality") || strings.Contains(b, "cost") || strings.Contains(b, "scored") || !strings.Contains(b, `"calls":10`) {
		t.Errorf("calm's series has quality or cost fields: %s", b)
	}
}

// near: a point keeps its figures in float32.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }

// costedCall makes a call of agent id, 30 ms long, with cost (none: 0)
// and score given inside it (none: negative), failed or not; it returns
// the call's ID.
func costedCall(t *testing.T, l *si.Loop, clk interface{ Advance(time.Duration) }, id string, cost float64, fail bool, score float64) uint64 {
	t.Helper()
	rep, _ := l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
		clk.Advance(30 * time.Millisecond)
		if cost > 0 {
			si.AddCost(ctx, cost)
		}
		if score >= 0 {
			if err := l.AddScore(ctx, score); err != nil {
				t.Errorf("AddScore: %v", err)
			}
		}
		if fail {
			return errors.New("upstream 400: bad request")
		}
		return nil
	})
	return rep.ID
}
