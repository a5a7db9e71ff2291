package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	siotel "github.com/self-improving-loop/selfimprove/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func newLoop(t *testing.T) (*si.Loop, *fakeclock.Clock) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clk
}

func TestSpansAndMetrics(t *testing.T) {
	l, clk := newLoop(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if _, err := siotel.RegisterMetrics(l, mp, siotel.Options{MaxAgentSeries: 1}); err != nil {
		t.Fatal(err)
	}
	w, err := siotel.Wrap(l, tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	boom := errors.New("upstream 503 api_key=sk-abcdefghijklmnopqrstuvwxyz123456")
	for i := range 4 {
		_, err := w.Execute(ctx, "a", func(ctx context.Context, _ si.Config) error {
			clk.Advance(30 * time.Millisecond)
			if i == 3 {
				return boom
			}
			si.AddCost(ctx, 2)
			return l.AddScore(ctx, 0.5)
		})
		if (i == 3) != (err == boom) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	w.Execute(ctx, "b", func(context.Context, si.Config) error { return nil })
	parent.End()

	checkCallSpans(t, rec.Ended(), parent.SpanContext().SpanID())

	got := collectMetrics(t, reader)
	checkSum(t, got, "selfimprove.calls", map[string]int64{"a/success": 3, "a/failure": 1, "_other/success": 1}, "outcome")
	checkSum(t, got, "selfimprove.changes", map[string]int64{"/applied": 0}, "result")
	if g, ok := got["selfimprove.agents.loaded"].(metricdata.Gauge[int64]); !ok || g.DataPoints[0].Value != l.Metrics().Agents {
		t.Errorf("agents loaded: %v", got["selfimprove.agents.loaded"])
	}
	if g, ok := got["selfimprove.config.version"].(metricdata.Gauge[int64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 1 {
		t.Errorf("config version: %v", got["selfimprove.config.version"])
	}
	if g, ok := got["selfimprove.quality.scored"].(metricdata.Gauge[int64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 3 {
		t.Errorf("quality scored: %v", got["selfimprove.quality.scored"])
	}
	for name, want := range map[string]float64{"selfimprove.quality.mean": 0.5, "selfimprove.cost.per_success": 2} {
		if g, ok := got[name].(metricdata.Gauge[float64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != want {
			t.Errorf("%s: %v, want %v for agent a", name, got[name], want)
		}
	}
	h, ok := got["selfimprove.call.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("duration: %T", got["selfimprove.call.duration"])
	}
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	if n != 5 {
		t.Errorf("duration count %d", n)
	}
}

// checkCallSpans checks the spans of TestSpansAndMetrics's five calls (three
// successes of a, a failure of a, a success of b) and of their parent.
func checkCallSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, parent trace.SpanID) {
	t.Helper()
	if len(spans) != 6 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans[:5] {
		if s.Name() != "selfimprove.call" || s.Parent().SpanID() != parent {
			t.Errorf("span %d: %s under %v", i, s.Name(), s.Parent().SpanID())
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes() {
			attrs[a.Key] = a.Value
		}
		wantOutcome, wantAgent := "success", "a"
		if i == 3 {
			wantOutcome = "failure"
		}
		if i == 4 {
			wantAgent = "b"
		}
		if attrs["selfimprove.agent"].AsString() != wantAgent || attrs["selfimprove.outcome"].AsString() != wantOutcome ||
			attrs["selfimprove.attempts"].AsInt64() != 1 || attrs["selfimprove.config.version"].AsInt64() != 1 {
			t.Errorf("span %d: %v", i, attrs)
		}
		if i == 3 && (s.Status().Code != codes.Error || s.Status().Description == "" || strings.Contains(s.Status().Description, "abcdefghij")) {
			t.Errorf("failed span status %+v", s.Status())
		}
	}
}

// collectMetrics collects reader's metrics by name.
func collectMetrics(t *testing.T, reader sdkmetric.Reader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

// checkSum checks the data points of the int64 sum name: want maps
// "agent/value of key" to the expected value.
func checkSum(t *testing.T, got map[string]metricdata.Aggregation, name string, want map[string]int64, key attribute.Key) {
	t.Helper()
	s, ok := got[name].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T", name, got[name])
	}
	seen := map[string]int64{}
	for _, dp := range s.DataPoints {
		a, _ := dp.Attributes.Value("agent")
		k, _ := dp.Attributes.Value(key)
		seen[a.AsString()+"/"+k.AsString()] = dp.Value
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%s %s = %d, want %d (%v)", name, k, seen[k], v, seen)
		}
	}
}

// TestFleetMetrics: a Loop with a fleet shows it up, its commits and
// leases.
func TestFleetMetrics(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	_, reader := fleetCommitted(t, clk, fleettest.New(clk))
	got := collectMetrics(t, reader)
	if g, ok := got["selfimprove.fleet.replicas"].(metricdata.Gauge[int64]); !ok || g.DataPoints[0].Value != 1 {
		t.Errorf("fleet replicas: %v", got["selfimprove.fleet.replicas"])
	}
	if g, ok := got["selfimprove.fleet.up"].(metricdata.Gauge[int64]); !ok || g.DataPoints[0].Value != 1 {
		t.Errorf("fleet up: %v", got["selfimprove.fleet.up"])
	}
	if s, ok := got["selfimprove.fleet.commits"].(metricdata.Sum[int64]); !ok || s.DataPoints[0].Value != 1 {
		t.Errorf("fleet commits: %v", got["selfimprove.fleet.commits"])
	}
	for _, name := range []string{"selfimprove.fleet.outages", "selfimprove.fleet.leases.taken", "selfimprove.fleet.revision.lag", "selfimprove.fleet.commit.time"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
}

// fleetCommitted returns a Loop on fleet f with its metrics registered on
// a manual reader, after one change of agent "a" committed and synced.
func fleetCommitted(t *testing.T, clk *fakeclock.Clock, f si.Fleet) (*si.Loop, *sdkmetric.ManualReader) {
	t.Helper()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reader := sdkmetric.NewManualReader()
	if _, err := siotel.RegisterMetrics(l, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetConfig("a", si.Config{Route: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := l.SyncFleet(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l, reader
}
