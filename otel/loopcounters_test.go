package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	siotel "github.com/self-improving-loop/selfimprove/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestStrategyAndTraceCountersExported: RegisterMetrics promises /metrics'
// numbers, and /metrics has the strategy's runs and errors, the tweaks
// refused and the traces written and lost; a failing strategy and a
// trace log show in the OpenTelemetry instruments as in Loop.Metrics.
func TestStrategyAndTraceCountersExported(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	strat := si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) {
		return nil, errors.New("the strategy's model is down")
	})
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(strat),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}), si.WithTraces(si.TracesSync),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reader := sdkmetric.NewManualReader()
	if _, err := siotel.RegisterMetrics(l, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context, si.Config) error { return errors.New("upstream said no") }
	for range 3 {
		l.ExecuteWithImprovement(context.Background(), "a", fail)
	}
	m := l.Metrics()
	if m.StrategyErrors == 0 || m.Traces == 0 {
		t.Fatalf("the loop ran no failing strategy or wrote no trace: %+v", m)
	}
	got := collectMetrics(t, reader)
	for name, want := range map[string]int64{
		"selfimprove.strategy.runs":   m.StrategyRuns,
		"selfimprove.strategy.errors": m.StrategyErrors,
		"selfimprove.tweaks.rejected": m.RejectedTweaks,
		"selfimprove.traces.written":  m.Traces,
		"selfimprove.traces.dropped":  m.TracesDropped,
	} {
		s, ok := got[name].(metricdata.Sum[int64])
		if !ok || len(s.DataPoints) != 1 || !s.IsMonotonic || s.DataPoints[0].Value != want {
			t.Errorf("%s: %v, want a counter of %d", name, got[name], want)
		}
	}
}
