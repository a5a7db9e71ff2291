package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// fixedAgent runs the quick start's story on agent id of l: 10 calls ok,
// then its route fails 10 times (the threshold), the strategy moves it
// to route "backup", whose calls succeed: the change is confirmed, and
// 38 more calls succeed. A call every 10 minutes, as in the quick start.
func fixedAgent(t *testing.T, l *si.Loop, clk *fakeclock.Clock, id string) {
	t.Helper()
	fixedEvery(t, l, clk, id, 24*time.Hour, 10*time.Minute)
}

// fixedEvery is fixedAgent with a window and a call every interval.
func fixedEvery(t *testing.T, l *si.Loop, clk *fakeclock.Clock, id string, window, interval time.Duration) {
	t.Helper()
	if err := l.SetThreshold(id, si.Threshold{Failures: 10, Window: window, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		l.ExecuteWithImprovement(context.Background(), id, func(_ context.Context, c si.Config) error {
			clk.Advance(30 * time.Millisecond)
			if i >= 10 && c.Route != "backup" {
				return errors.New("upstream 503: service unavailable")
			}
			return nil
		})
		clk.Advance(interval)
	}
}

func toBackup(_ context.Context, a si.Analysis) (*si.Tweak, error) {
	c := a.Config
	c.Route = "backup"
	return &si.Tweak{Config: c, Reason: "the primary fails: try the backup"}, nil
}

// TestTroubleFollowsTheCurrentConfig: an agent whose fix was confirmed
// and whose calls under it succeed is not in trouble, though its window's
// health is still low from the failures before the fix (issue 43 item 5:
// the quick-start agent stayed red, "1 unhealthy", 0.87); on a fallback
// of its ladder it is "watch", with its route named; an agent failing
// now is in trouble and sorts first, in the list's unhealthy filter and
// the overview.
func TestTroubleFollowsTheCurrentConfig(t *testing.T) {
	l, clk := newLoop(t, si.WithStrategy(si.StrategyFunc(toBackup)))
	if err := l.SetRoutes("laddered", si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}); err != nil {
		t.Fatal(err)
	}
	fixedAgent(t, l, clk, "fixed")
	fixedAgent(t, l, clk, "laddered")
	traffic(t, l, clk, "failing", 20, 5)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	got := map[string]admin.AgentSummary{}
	var list admin.AgentList
	getJSON(t, h, "/api/agents", &list)
	for _, a := range list.Agents {
		got[a.ID] = a
	}
	f := got["fixed"]
	if f.ChangeState != si.ChangeConfirmed || f.Health >= 0.9 {
		t.Fatalf("the setup: fixed is %q with health %v; want a confirmed change and a window health under 0.9", f.ChangeState, f.Health)
	}
	if f.State != admin.StateOK || !f.Healthy || f.Current.Version != 2 || f.Current.Failures != 0 || f.Current.Calls == 0 || f.Route != "backup" || f.Fallback {
		t.Errorf("fixed: state %q (%s), healthy %v, current %+v, route %q fallback %v; want ok, v2's calls all ok, route backup, no fallback",
			f.State, f.Why, f.Healthy, f.Current, f.Route, f.Fallback)
	}
	if f.Next == "" {
		t.Errorf("fixed: no next step in the summary")
	}
	ld := got["laddered"]
	if ld.State != admin.StateWatch || !ld.Healthy || ld.Route != "backup" || ld.Primary != "primary" || !ld.Fallback {
		t.Errorf("laddered: state %q (%s), healthy %v, route %q (primary %q) fallback %v; want watch on the fallback backup",
			ld.State, ld.Why, ld.Healthy, ld.Route, ld.Primary, ld.Fallback)
	}
	bad := got["failing"]
	if bad.State != admin.StateTrouble || bad.Healthy || bad.Why == "" {
		t.Errorf("failing: state %q (%s), healthy %v; want trouble", bad.State, bad.Why, bad.Healthy)
	}
	var only admin.AgentList
	getJSON(t, h, "/api/agents?unhealthy=true", &only)
	if len(only.Agents) != 1 || only.Agents[0].ID != "failing" {
		t.Errorf("unhealthy=true lists %+v; want failing alone", only.Agents)
	}
	o := overviewOf(t, h, "")
	if len(o.Agents) != 3 || o.Agents[0].ID != "failing" || o.Agents[1].ID != "laddered" || o.Agents[2].ID != "fixed" {
		t.Errorf("the overview's order: %v; want failing (trouble), laddered (watch), fixed (ok)", ids(o))
	}
}

// getJSON serves GET path with h and decodes the answer into v.
func getJSON(t testing.TB, h http.Handler, path string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(httptestGet(h, path)), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestTroubleCurrentDenseCalls: calls a second apart, in a window of an
// hour (buckets of 56 s): the change, its verification and the calls
// after it share the window's buckets with the failures before it. The
// calls under the confirmed config count by its verification (exact),
// so the fixed agent shows its successes, not "no call under v2 yet".
func TestTroubleCurrentDenseCalls(t *testing.T) {
	l, clk := newLoop(t, si.WithStrategy(si.StrategyFunc(toBackup)))
	fixedEvery(t, l, clk, "dense", time.Hour, time.Second)
	h := admin.Handler(l, admin.Options{Now: clk.Now, SampleEvery: -1})
	var d admin.AgentDetail
	getJSON(t, h, "/api/agents/dense", &d)
	if d.ChangeState != si.ChangeConfirmed || len(d.Changes) != 1 {
		t.Fatalf("the setup: %q, %d changes; want one change, confirmed", d.ChangeState, len(d.Changes))
	}
	after := d.Changes[0].After
	if d.State != admin.StateOK || d.Current.Version != 2 || d.Current.Failures != 0 || d.Current.Calls < after.Calls || d.Current.SuccessRate != 1 {
		t.Errorf("dense: state %q (%s), current %+v; want ok, v2's %d verified calls at least, none failed", d.State, d.Why, d.Current, after.Calls)
	}
}
