package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestSeries: an agent's timeline has a point per minute sampled, with
// the minute's calls, success rate, interpolated p50 and p95, and
// version; the overview lists the agent in trouble first, with its day.
func TestSeries(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	call := func(id string, d time.Duration, fail bool) {
		l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
			clk.Advance(d)
			if fail {
				return errors.New("upstream 400: bad request")
			}
			return nil
		})
	}
	get := func(path string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(httptestGet(h, path)), v); err != nil {
			t.Fatal(err)
		}
	}
	start := clk.Now().Truncate(time.Minute)
	clk.Advance(start.Add(time.Minute).Sub(clk.Now()))
	var s admin.Series
	for m := range 5 {
		for i := range 10 {
			call("x", 30*time.Millisecond, m == 3 && i < 4)
			call("calm", 30*time.Millisecond, false)
		}
		get("/api/agents/x/series?range=hour", &s)
		clk.Advance(time.Minute - 600*time.Millisecond)
	}
	if len(s.Points) != 5 || s.Range != "hour" || s.Step != time.Minute || !s.Now.Equal(clk.Now().Add(-time.Minute+600*time.Millisecond)) {
		t.Fatalf("series %+v", s)
	}
	for m, p := range s.Points {
		want := admin.SeriesPoint{T: start.Add(time.Duration(m+1) * time.Minute).UTC(), Calls: 10, SuccessRate: 1,
			// 30 ms each: in (25, 50] ms, spread over (25, 35] ms, which
			// their sum allows.
			P50: 30 * time.Millisecond, P95: 34500 * time.Microsecond, Version: 1}
		if m == 3 {
			want.Failures, want.SuccessRate = 4, 0.6
		}
		if p != want {
			t.Errorf("point %d: %+v, want %+v", m, p, want)
		}
	}
	if b := httptestGet(h, "/api/agents/x/series?range=year"); !json.Valid([]byte(b)) || len(b) == 0 {
		t.Errorf("range=year: %s", b)
	}
	var o admin.Overview
	get("/api/overview?limit=1", &o)
	if o.Total != 2 || len(o.Agents) != 1 || o.Agents[0].ID != "x" || len(o.Agents[0].Day) != 96 {
		t.Fatalf("overview: %+v", o)
	}
	if d := o.Agents[0].Day; d[95] != 0.92 {
		t.Errorf("x's last quarter hour: %v, want 46/50", d[95])
	}
}
