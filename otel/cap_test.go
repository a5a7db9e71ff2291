package otel_test

import (
	"context"
	"errors"
	"fmt"
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

// TestCallsFitTheSDKDefaultCardinalityLimit: RegisterMetrics at its
// default cap on a default SDK MeterProvider with 1,200 agents. Before,
// the default cap was 1,000 agents, 3,003 series of selfimprove.calls
// (3 an agent), over the SDK's default limit of 2,000 an instrument: past
// 667 agents the SDK merged the rest, _other included, into its overflow
// series without an agent attribute. Now the default cap is 600: 1,803
// series, each agent of the first 600 with its own, the other 600 summed
// in _other, none in the SDK's overflow.
func TestCallsFitTheSDKDefaultCardinalityLimit(t *testing.T) {
	l, _ := newLoop(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if _, err := siotel.RegisterMetrics(l, mp, siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	const n = 1200
	for i := range n {
		l.ExecuteWithImprovement(context.Background(), fmt.Sprintf("agent-%05d", i), func(context.Context, si.Config) error { return nil })
	}
	got := collectMetrics(t, reader)
	sum, ok := got["selfimprove.calls"].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("selfimprove.calls: %T", got["selfimprove.calls"])
	}
	agents := map[string]int64{}
	overflow := int64(0)
	for _, dp := range sum.DataPoints {
		if v, ok := dp.Attributes.Value("agent"); ok {
			agents[v.AsString()] += dp.Value
		} else {
			overflow += dp.Value
		}
	}
	want := siotel.DefaultMaxAgentSeries
	if len(agents) != want+1 || agents["_other"] != int64(n-want) || agents[fmt.Sprintf("agent-%05d", want-1)] != 1 || overflow != 0 {
		t.Errorf("want %d agents with a series, agent-%05d with 1 call, _other=%d, no overflow; got %d agents, _other=%d, overflow=%d",
			want+1, want-1, n-want, len(agents), agents["_other"], overflow)
	}
	if len(sum.DataPoints) >= 2000 {
		t.Errorf("selfimprove.calls has %d series, at the SDK's default limit", len(sum.DataPoints))
	}
}

// durationCounts returns the counts of the duration histogram by
// "agent/outcome".
func durationCounts(t *testing.T, reader sdkmetric.Reader) map[string]uint64 {
	t.Helper()
	got := collectMetrics(t, reader)
	out := map[string]uint64{}
	if got["selfimprove.call.duration"] == nil {
		return out
	}
	h, ok := got["selfimprove.call.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("duration: %T", got["selfimprove.call.duration"])
	}
	for _, dp := range h.DataPoints {
		a, _ := dp.Attributes.Value("agent")
		o, _ := dp.Attributes.Value("outcome")
		out[a.AsString()+"/"+o.AsString()] += dp.Count
	}
	return out
}

// TestDurationSeriesCappedByMaxAgentSeries: before, the duration
// histogram of Wrap had a series for every agent ID it saw, so hostile
// IDs grew it without end, though the docs promised the cap of
// MaxAgentSeries. Now the first MaxAgentSeries agents seen keep their own
// series and the others are recorded under _other, for Wrap (the default,
// 600) and WrapWith alike.
func TestDurationSeriesCappedByMaxAgentSeries(t *testing.T) {
	ok := func(context.Context, si.Config) error { return nil }
	t.Run("default", func(t *testing.T) {
		l, _ := newLoop(t)
		reader := sdkmetric.NewManualReader()
		w, err := siotel.Wrap(l, nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		if err != nil {
			t.Fatal(err)
		}
		const n = 1500
		for i := range n {
			w.Execute(context.Background(), fmt.Sprintf("hostile-%05d", i), ok)
		}
		got := durationCounts(t, reader)
		limit := siotel.DefaultMaxAgentSeries
		if len(got) != limit+1 || got["_other/success"] != uint64(n-limit) || got["hostile-00000/success"] != 1 || got[fmt.Sprintf("hostile-%05d/success", limit)] != 0 {
			t.Errorf("want %d series, _other with %d calls; got %d series, _other with %d", limit+1, n-limit, len(got), got["_other/success"])
		}
	})
	t.Run("WrapWith", func(t *testing.T) {
		l, _ := newLoop(t)
		reader := sdkmetric.NewManualReader()
		w, err := siotel.WrapWith(l, nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), siotel.Options{MaxAgentSeries: 2})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("no")
		for _, id := range []string{"_other", "b", "a", "c", "b", "a", "c"} {
			w.Execute(context.Background(), id, ok)
		}
		w.Execute(context.Background(), "c", func(context.Context, si.Config) error { return boom })
		got := durationCounts(t, reader)
		want := map[string]uint64{"b/success": 2, "a/success": 2, "_other/success": 3, "_other/failure": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("duration counts %v, want %v", got, want)
		}
	})
}

// TestDurationCountsTheCallsTheLoopCounts: before, the duration histogram
// recorded every call Execute returned, those an open circuit refused
// (fn never ran) and those with an invalid agent ID (run untracked)
// among them, as near-zero failures the loop never counted. Now it
// records the calls the loop counts: its count is selfimprove.calls's
// and the agent's Latency's.
func TestDurationCountsTheCallsTheLoopCounts(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithCircuitBreaker(si.CircuitBreaker{Failures: 2, CoolOff: time.Hour}),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if _, err := siotel.RegisterMetrics(l, mp, siotel.Options{}); err != nil {
		t.Fatal(err)
	}
	w, err := siotel.Wrap(l, nil, mp)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("upstream said no")
	ran := 0
	fail := func(context.Context, si.Config) error {
		ran++
		clk.Advance(10 * time.Millisecond)
		return boom
	}
	for range 12 {
		w.Execute(context.Background(), "a", fail)
	}
	if rep, _ := w.Execute(context.Background(), "", fail); !errors.Is(rep.LoopErr, si.ErrInvalidAgentID) || rep.Attempts != 1 {
		t.Fatalf("a call with an empty agent ID: %+v", rep)
	}
	var view si.AgentView
	for v := range l.Views() {
		if v.AgentID == "a" {
			view = v
		}
	}
	got := durationCounts(t, reader)
	calls := int64(0)
	for _, dp := range collectMetrics(t, reader)["selfimprove.calls"].(metricdata.Sum[int64]).DataPoints {
		calls += dp.Value
	}
	if ran != 3 || view.Latency.Count != 2 || calls != 2 || len(got) != 1 || got["a/failure"] != 2 {
		t.Errorf("fn ran %d times; loop: latency count %d; selfimprove.calls %d; duration counts %v, want a/failure: 2 alone",
			ran, view.Latency.Count, calls, got)
	}
}
