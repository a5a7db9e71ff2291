package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	si "github.com/self-improving-loop/selfimprove"
)

// smallWindow gives agent id an 80 s analysis window (buckets of 1.25 s;
// cluster buckets of 10 s) and a threshold that never triggers.
func smallWindow(t *testing.T, e *env, id string, window time.Duration) {
	t.Helper()
	if err := e.l.SetThreshold(id, si.Threshold{Failures: si.MaxThresholdFailures, Window: window, Cooldown: time.Second}); err != nil {
		t.Fatal(err)
	}
}

func TestClustersCountTrendRecurrence(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	smallWindow(t, e, "a", 80*time.Second)
	e.call("a", errors.New("timeout after 30s on req 123"), 0)
	e.call("a", errors.New("timeout after 45s on req 999"), 0)
	e.call("a", errors.New("HTTP 429 Too Many Requests"), 0)
	e.call("a", nil, 0)

	ignore := cmpopts.EquateEmpty()
	tsig := "timeout after <n>s on req <n>"
	want := []si.Cluster{
		{ID: failure.ClusterID(tsig), Signature: tsig, Class: failure.ClassTimeout, RootCause: failure.RootCauseToolFailure,
			Count: 2, Total: 2, FirstSeen: t0, LastSeen: t0, Trend: si.TrendNew,
			Examples: []string{"timeout after 30s on req 123", "timeout after 45s on req 999"}},
		{ID: failure.ClusterID("http <n> too many requests"), Signature: "http <n> too many requests", Class: failure.ClassRateLimit,
			RootCause: failure.RootCauseToolFailure, Count: 1, Total: 1, FirstSeen: t0, LastSeen: t0, Trend: si.TrendNew,
			Examples: []string{"HTTP 429 Too Many Requests"}},
	}
	if d := cmp.Diff(want, e.l.Clusters("a"), ignore); d != "" {
		t.Fatalf("clusters (-want +got):\n%s", d)
	}

	e.call("a", errors.New("timeout after 1s on req 5"), 0)
	if c := e.l.Clusters("a")[0]; !c.Recurring || c.Count != 3 {
		t.Fatalf("third failure: %+v", c)
	}

	// 50 s on: the three failures are in the older half of the window.
	e.clk.Advance(50 * time.Second)
	if c := e.l.Clusters("a")[0]; c.Trend != si.TrendDecreasing || c.Count != 3 {
		t.Fatalf("after 50 s: %+v", c)
	}
	// Six more now: increasing.
	for i := range 6 {
		e.call("a", fmt.Errorf("timeout after %ds on req %d", i, i), 0)
	}
	c := e.l.Clusters("a")[0]
	if c.Trend != si.TrendIncreasing || c.Count != 9 || c.Total != 9 || !c.LastSeen.Equal(t0.Add(50*time.Second)) {
		t.Fatalf("after six more: %+v", c)
	}
	// Three more 40 s later: 6 older, 3 newer, not twice as many either way.
	e.clk.Advance(40 * time.Second)
	for range 3 {
		e.call("a", errors.New("timeout after 9s on req 9"), 0)
	}
	if c := e.l.Clusters("a")[0]; c.Trend != si.TrendDecreasing || c.Count != 9 {
		t.Fatalf("after three more: %+v", c)
	}
	// Out of the window: no clusters, but the totals are kept.
	e.clk.Advance(200 * time.Second)
	if cs := e.l.Clusters("a"); len(cs) != 0 {
		t.Fatalf("clusters after the window: %+v", cs)
	}
	e.call("a", errors.New("timeout after 2s on req 2"), 0)
	if c := e.l.Clusters("a")[0]; c.Total != 13 || c.Count != 1 || c.Trend != si.TrendStable || !c.FirstSeen.Equal(t0) {
		t.Fatalf("back after the window: %+v", c)
	}
}

func TestClustersBoundedLeastRecentFirst(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	for i := range 20 {
		e.call("a", fmt.Errorf("failure kind %c", 'a'+i), 0)
		e.clk.Advance(time.Second)
	}
	cs := e.l.Clusters("a")
	if len(cs) != 8 {
		t.Fatalf("%d clusters, want 8", len(cs))
	}
	for _, c := range cs {
		if c.Signature < "failure kind m" {
			t.Errorf("kept an old cluster: %q", c.Signature)
		}
	}
}

func TestClusterOfPanic(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	func() {
		defer func() { _ = recover() }()
		e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { panic("index out of range [3]") })
	}()
	cs := e.l.Clusters("a")
	if len(cs) != 1 || cs[0].Class != failure.ClassPanic || cs[0].Signature != "panic: index out of range [<n>]" {
		t.Fatalf("clusters after a panic: %+v", cs)
	}
}

func TestHealthHalfLife(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	if h := e.l.Health("a"); h != 1 {
		t.Fatalf("health with no data = %v, want 1", h)
	}
	smallWindow(t, e, "a", 64*time.Second)     // buckets of 1 s, half-life 16 s
	e.call("a", errBoom, 500*time.Millisecond) // ends mid-bucket
	if h := e.l.Health("a"); h != 0 {
		t.Fatalf("health after one failure = %v, want 0", h)
	}
	e.clk.Advance(16 * time.Second)
	e.call("a", nil, 0)
	// The failure is one half-life old: it weighs 1/2 against the
	// success's 1.
	if h, want := e.l.Health("a"), 1/1.5; h != want {
		t.Fatalf("health = %v, want %v", h, want)
	}
	e.clk.Advance(16 * time.Second)
	// Now 2 and 1 half-lives old: 0.5 / (0.25 + 0.5).
	if h, want := e.l.Health("a"), 0.5/0.75; h < want-1e-12 || h > want+1e-12 {
		t.Fatalf("health = %v, want %v", h, want)
	}
	e.clk.Advance(2 * time.Minute)
	if h := e.l.Health("a"); h != 1 {
		t.Fatalf("health after the window = %v, want 1", h)
	}
}

func TestSharedCauses(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	e.call("a", errors.New("upstream 503 from api.example.com, req 1"), 0)
	e.call("b", errors.New("upstream 503 from api.example.com, req 2"), 0)
	e.call("c", errors.New("Service Unavailable"), 0)
	e.call("d", errors.New("something odd"), 0)
	e.call("e", errors.New("something odd"), time.Second)
	sig := failure.Signature("upstream 503 from api.example.com, req 1")
	want := []si.SharedCause{
		{ClusterID: failure.ClusterID("something odd"), Signature: "something odd", Class: failure.ClassOther, Agents: []string{"d", "e"}, LastSeen: t0.Add(time.Second)},
		{ClusterID: failure.ClusterID(sig), Signature: sig, Class: failure.ClassOverloaded, Agents: []string{"a", "b"}, LastSeen: t0},
		{Class: failure.ClassOverloaded, Agents: []string{"a", "b", "c"}, LastSeen: t0},
	}
	if d := cmp.Diff(want, e.l.SharedCauses()); d != "" {
		t.Fatalf("shared causes (-want +got):\n%s", d)
	}
	// The merged clusters name their agents.
	all := e.l.AllClusters()
	if len(all) != 3 || all[0].Count != 2 || len(all[0].Agents) != 2 {
		t.Fatalf("all clusters: %+v", all)
	}
	// A restart rebuilds the index from the agents as they load for
	// their calls; getters load nothing.
	e.l.Close()
	e.open(si.WithStrategy(nil))
	e.l.Stats("a")
	e.l.Stats("b")
	if got := e.l.SharedCauses(); len(got) != 0 {
		t.Fatalf("getters loaded agents: %+v", got)
	}
	e.call("a", nil, 0)
	e.call("b", nil, 0)
	if got := e.l.SharedCauses(); len(got) != 2 || got[0].Signature != sig {
		t.Fatalf("after restart: %+v", got)
	}
	// Beyond the agents' windows (72 h for a rarely called agent) nothing
	// is shared.
	e.clk.Advance(73 * time.Hour)
	if got := e.l.SharedCauses(); len(got) != 0 {
		t.Fatalf("after the window: %+v", got)
	}
}

// The strategy gets the clusters, the health and the shared causes.
func TestAnalysisCarriesEvidence(t *testing.T) {
	s := &tweakStrategy{}
	e := newEnv(t, si.WithStrategy(s), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
	e.call("b", errors.New("dial tcp 10.0.0.1:443: connect: connection refused"), 0)
	e.call("a", nil, 0)
	e.call("a", errors.New("dial tcp 10.0.0.2:443: connect: connection refused"), 0)
	e.call("a", errors.New("dial tcp 10.0.0.3:443: connect: connection refused"), 0)
	if s.count() != 1 {
		t.Fatalf("strategy ran %d times", s.count())
	}
	an := s.seen[0]
	if len(an.Clusters) != 1 || an.Clusters[0].Class != failure.ClassNetwork || an.Clusters[0].Count != 2 {
		t.Errorf("clusters: %+v", an.Clusters)
	}
	if an.Health <= 0.3 || an.Health >= 0.4 {
		t.Errorf("health %v, want 1/3", an.Health)
	}
	if len(an.Shared) != 2 || an.Shared[0].Agents[0] != "a" || an.Shared[0].Agents[1] != "b" {
		t.Errorf("shared: %+v", an.Shared)
	}
	for _, f := range an.Failures {
		if f.Class != failure.ClassNetwork || f.Cluster != an.Clusters[0].ID {
			t.Errorf("failure %+v", f)
		}
	}
}

func TestClustersSurviveRestart(t *testing.T) {
	e := newEnv(t, si.WithStrategy(nil))
	e.calls("a", 2, errors.New("quota exceeded for key 12"), 0)
	before := e.l.Clusters("a")
	e.l.Close()
	e.open(si.WithStrategy(nil))
	if d := cmp.Diff(before, e.l.Clusters("a"), cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("clusters after restart (-before +after):\n%s", d)
	}
}
