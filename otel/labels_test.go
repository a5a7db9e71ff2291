package otel_test

import (
	"context"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	siotel "github.com/self-improving-loop/selfimprove/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestAgentsOfOneLabelNotMerged: two agent IDs that are not UTF-8 and
// differ only in their invalid bytes have one agent attribute ("a\uFFFD");
// the second is summed under _other, as in /metrics, instead of both
// being observed under the one attribute, where the SDK added their calls
// together and kept either's config version and quality.
func TestAgentsOfOneLabelNotMerged(t *testing.T) {
	l, _ := newLoop(t)
	reader := sdkmetric.NewManualReader()
	if _, err := siotel.RegisterMetrics(l, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, si.Config) error { return nil }
	for range 2 {
		l.ExecuteWithImprovement(context.Background(), "a\xfe", ok)
	}
	for range 5 {
		l.ExecuteWithImprovement(context.Background(), "a\xff", ok)
	}
	if err := l.SetConfig("a\xff", si.Config{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	got := collectMetrics(t, reader)
	checkSum(t, got, "selfimprove.calls", map[string]int64{"a\uFFFD/success": 2, "_other/success": 5}, "outcome")
	g, _ := got["selfimprove.config.version"].(metricdata.Gauge[int64])
	if len(g.DataPoints) != 1 || g.DataPoints[0].Value != 1 {
		t.Errorf("config version %v, want a\\xfe's, 1, alone", g.DataPoints)
	}
}
