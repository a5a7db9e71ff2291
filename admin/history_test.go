package admin_test

import (
	"log/slog"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestHistoryFromTheStore: a handler over a Loop opened read-only on a
// state directory written by another process (`selfimprove serve --dir`
// after the quick start) shows the calls that process made: the day's
// timeline has their points (stored, with the versions of the changes),
// and the overview's sparkline has runs of quarter hours, not single
// dots (issue 43 item 4: the timeline was empty, "no calls sampled in
// this range", the sparklines single dots).
func TestHistoryFromTheStore(t *testing.T) {
	dir := t.TempDir()
	clk := fakeclock.New(t0)
	w, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(si.StrategyFunc(toBackup)),
		si.WithFlushInterval(0), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}), si.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	fixedAgent(t, w, clk, "fixed") // 60 calls, 10 minutes apart: 10 hours
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := si.OpenReadOnlyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := si.New(si.WithStore(ro), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	var s admin.Series
	getJSON(t, h, "/api/agents/fixed/series?range=day", &s)
	calls, fails, versions := 0, 0, map[int]bool{}
	for _, p := range s.Points {
		if !p.Stored || p.Width <= 0 || p.Mean <= 0 {
			t.Errorf("point %+v: want a stored bucket with its width and mean latency", p)
		}
		calls += p.Calls
		fails += p.Failures
		versions[p.Version] = true
	}
	if calls != 60 || fails != 10 || !versions[1] || !versions[2] {
		t.Errorf("the day's timeline: %d points, %d calls, %d failures, versions %v; want the 60 calls, 10 failures, v1 and v2",
			len(s.Points), calls, fails, versions)
	}
	o := overviewOf(t, h, "")
	if len(o.Agents) != 1 {
		t.Fatalf("overview: %+v", o)
	}
	run, longest := 0, 0
	for _, r := range o.Agents[0].Day {
		if r < 0 {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	if longest < 30 { // 10 hours: 40 quarter hours
		t.Errorf("the sparkline's longest run is %d quarter hours; want the 10 hours of calls: %v", longest, o.Agents[0].Day)
	}
	if a := o.Agents[0]; a.State == admin.StateTrouble {
		t.Errorf("read-only: %s in trouble (%s)", a.ID, a.Why)
	}
}
