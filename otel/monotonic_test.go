package otel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	siotel "github.com/self-improving-loop/selfimprove/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// callSeries returns selfimprove.calls by "agent/outcome", checking it is
// a monotonic counter.
func callSeries(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	s, ok := collectMetrics(t, reader)["selfimprove.calls"].(metricdata.Sum[int64])
	if !ok || !s.IsMonotonic {
		t.Fatalf("selfimprove.calls is not a monotonic sum: %+v", s)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		a, _ := dp.Attributes.Value("agent")
		o, _ := dp.Attributes.Value("outcome")
		out[a.AsString()+"/"+o.AsString()] = dp.Value
	}
	return out
}

// TestCallsCounterNeverGoesDownAfterEviction: selfimprove.calls is a
// Counter, and a backend takes a lower value for a reset (a spurious
// rate). The agent's own counts start again from zero when it is evicted
// and loaded again, and _other's sum drops when an agent in it is
// evicted; before, both were exported as read, and went down. Now each
// series keeps counting the calls made in this process.
func TestCallsCounterNeverGoesDownAfterEviction(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithMaxAgents(2), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reader := sdkmetric.NewManualReader()
	if _, err := siotel.RegisterMetrics(l, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{MaxAgentSeries: 1}); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, si.Config) error { return nil }
	call := func(id string, n int) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), id, ok)
		}
	}
	call("a", 3) // a has its own series
	call("b", 4) // b is summed under _other
	before := callSeries(t, reader)
	call("c", 1) // evicts a (or b): the cap is 2 agents
	call("a", 1) // a loaded again, from zero
	call("b", 1)
	after := callSeries(t, reader)
	for k, v := range before {
		if after[k] < v {
			t.Errorf("selfimprove.calls %s went down from %d to %d (before %v, after %v)", k, v, after[k], before, after)
		}
	}
	// 10 calls made; c's one call is not seen: c was loaded and evicted
	// between the two collections (see Options.MaxAgentSeries).
	if got := after["a/success"] + after["_other/success"]; got != 9 {
		t.Errorf("selfimprove.calls counts %d successes in all, want the 9 of the agents seen in memory (%v)", got, after)
	}
	if l.Metrics().Evictions == 0 {
		t.Fatalf("no agent was evicted: %+v", l.Metrics())
	}
}

// TestFleetCommitTimeInSeconds: selfimprove.fleet.commit.time was an
// integer count of nanoseconds without a unit, which a backend reads as
// a plain number; OpenTelemetry's conventions want durations in seconds,
// unit "s", as selfimprove.call.duration is. The same for the slowest
// commit, selfimprove.fleet.commit.max.
func TestFleetCommitTimeInSeconds(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, reader := fleetCommitted(t, clk, slowCommits{fleettest.New(clk), clk})
	m := l.Metrics()
	if m.FleetCommits == 0 || m.FleetCommitNS < int64(250*time.Millisecond) {
		t.Fatalf("no commit to the fleet: %+v", m)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch mt.Name {
			case "selfimprove.fleet.commit.time":
				found++
				s, ok := mt.Data.(metricdata.Sum[float64])
				if mt.Unit != "s" || !ok || !s.IsMonotonic || len(s.DataPoints) != 1 || s.DataPoints[0].Value != float64(m.FleetCommitNS)/1e9 {
					t.Errorf("%s: unit %q, %T %+v; want a float counter of %v s", mt.Name, mt.Unit, mt.Data, mt.Data, float64(m.FleetCommitNS)/1e9)
				}
			case "selfimprove.fleet.commit.max":
				found++
				g, ok := mt.Data.(metricdata.Gauge[float64])
				if mt.Unit != "s" || !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != float64(m.FleetCommitMaxNS)/1e9 {
					t.Errorf("%s: unit %q, %T %+v; want a float gauge of %v s", mt.Name, mt.Unit, mt.Data, mt.Data, float64(m.FleetCommitMaxNS)/1e9)
				}
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of selfimprove.fleet.commit.time and .max", found)
	}
}

// slowCommits is a fleet whose commits take 250ms of the fake clock.
type slowCommits struct {
	*fleettest.Fleet
	clk *fakeclock.Clock
}

func (f slowCommits) Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error) {
	f.clk.Advance(250 * time.Millisecond)
	return f.Fleet.Commit(ctx, agentID, rev, value)
}

// TestCallsCounterDeltaExporterCountsEachCallOnce: with a delta exporter
// (OTLP to a backend that takes deltas), the SDK forgets a series that a
// collection does not observe, and counts the whole value of its next
// observation as new. An agent evicted for one collection, then loaded
// again, must add only its new calls. Before, its series was not observed
// while it was out of memory, yet came back at its remembered total: the
// 3 calls it made before were counted twice (a/success summed 9 deltas for
// 6 calls).
func TestCallsCounterDeltaExporterCountsEachCallOnce(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithMaxAgents(1), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	delta := func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(delta))
	if _, err := siotel.RegisterMetrics(l, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, si.Config) error { return nil }
	call := func(id string, n int) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), id, ok)
		}
	}
	sum := map[string]int64{}
	collect := func() {
		for k, v := range callSeries(t, reader) {
			if v < 0 {
				t.Errorf("selfimprove.calls %s: a delta of %d", k, v)
			}
			sum[k] += v
		}
	}
	call("a", 3)
	collect()
	call("b", 1) // evicts a: the cap is 1 agent
	collect()
	call("a", 1) // evicts b; a loaded again
	collect()
	call("a", 2)
	collect()
	if sum["a/success"] != 6 || sum["b/success"] != 1 {
		t.Errorf("the deltas of selfimprove.calls sum to %v; want a/success 6 and b/success 1, the calls made", sum)
	}
	if l.Metrics().Evictions < 2 {
		t.Fatalf("agents not evicted: %+v", l.Metrics())
	}
}
