package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/stream"
)

// TestMetricsParse reads /metrics with the Prometheus text parser and
// checks the values against the loop's own numbers.
func TestMetricsParse(t *testing.T) {
	l := metricsLoop(t)
	defer l.Close()
	srv := httptest.NewServer(admin.Handler(l, admin.Options{MaxAgentSeries: 4}))
	defer srv.Close()
	fams := scrapeMetrics(t, srv.URL+"/metrics")

	byAgent := map[string]si.AgentView{}
	for m := range l.Views() {
		byAgent[m.AgentID] = m
	}
	// The first four IDs by byte order have their own series.
	own := map[string]string{ // label → ID
		"bad\\xFFutf8": "bad\xffutf8", "nul\x00": "nul\x00", "plain": "plain", "q\"uote\\back\nline": "q\"uote\\back\nline",
	}
	checkCallSeries(t, fams["selfimprove_calls_total"], byAgent, own)
	checkHistograms(t, fams["selfimprove_call_duration_seconds"], byAgent, own, func(v *si.AgentView) *si.Histogram { return &v.Latency })
	checkHistograms(t, fams["selfimprove_first_token_seconds"], byAgent, own, func(v *si.AgentView) *si.Histogram { return &v.FirstToken })
	checkLoopSeries(t, fams, l)
	t.Logf("%d families", len(fams))
}

// metricsLoop returns a Loop that has run calls of five agents, with IDs
// that need escaping or are not valid UTF-8, on a simulated clock.
func metricsLoop(t *testing.T) *si.Loop {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithDefaultConfig(si.Config{FirstTokenTimeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"plain", "q\"uote\\back\nline", "nul\x00", "bad\xffutf8", "é"}
	for n, id := range ids {
		for i := range 10 + n {
			l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
				if i%2 == 0 { // a stream: its first token comes first
					clk.Advance(time.Duration(i) * 7 * time.Millisecond)
					stream.FirstToken(ctx)
				}
				clk.Advance(time.Duration(i) * 30 * time.Millisecond)
				if i%4 == 3 {
					return errors.New("boom")
				}
				return nil
			})
		}
	}
	l.SetConfig("plain", si.Config{MaxAttempts: 2})
	return l
}

// scrapeMetrics gets url, checks its content type, and parses it with the
// Prometheus text parser.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); expfmt.ResponseFormat(res.Header) != expfmt.NewFormat(expfmt.TypeTextPlain) {
		t.Errorf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// labelValue returns the value of m's label name, or "".
func labelValue(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// checkCallSeries checks the calls counter: a success and a failure series
// for each agent label in own (label → ID), and for "_other", the agent "é".
func checkCallSeries(t *testing.T, calls *dto.MetricFamily, byAgent map[string]si.AgentView, own map[string]string) {
	t.Helper()
	if calls == nil || calls.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("calls: %v", calls)
	}
	seen := 0
	for _, m := range calls.GetMetric() {
		a, outcome := labelValue(m, "agent"), labelValue(m, "outcome")
		want := byAgent["é"]
		if a != "_other" {
			id, ok := own[a]
			if !ok {
				t.Fatalf("unexpected agent label %q", a)
			}
			want = byAgent[id]
		}
		v := int64(m.GetCounter().GetValue())
		switch outcome {
		case "success":
			seen++
			if v != want.Successes {
				t.Errorf("%q success %d, want %d", a, v, want.Successes)
			}
		case "failure":
			if v != want.Failures {
				t.Errorf("%q failure %d, want %d", a, v, want.Failures)
			}
		}
	}
	if seen != 5 {
		t.Errorf("%d agents with success series, want 5", seen)
	}
}

// checkHistograms checks the latency histogram of each agent label in own
// (label → ID): count, sum, and each bucket's bound and cumulative count.
// checkHistograms checks a family of per-agent histograms against the
// one of each agent's view that of picks.
func checkHistograms(t *testing.T, hist *dto.MetricFamily, byAgent map[string]si.AgentView, own map[string]string, of func(*si.AgentView) *si.Histogram) {
	t.Helper()
	if hist == nil || hist.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("histogram: %v", hist)
	}
	for _, m := range hist.GetMetric() {
		a := labelValue(m, "agent")
		if a == "_other" {
			continue
		}
		v := byAgent[own[a]]
		want := of(&v)
		h := m.GetHistogram()
		if h.GetSampleCount() != want.Count || h.GetSampleSum() != want.Sum.Seconds() ||
			len(h.GetBucket()) != len(want.Counts) || want.Count == 0 {
			t.Errorf("%q histogram %v, want %+v", a, h, want)
		}
		var cum uint64
		for i, b := range h.GetBucket() {
			cum += want.Counts[i]
			bound := math.Inf(1)
			if i < len(want.Bounds) {
				bound = want.Bounds[i].Seconds()
			}
			if b.GetCumulativeCount() != cum || b.GetUpperBound() != bound {
				t.Errorf("%q bucket %d: %v, want %d ≤ %v", a, i, b, cum, bound)
			}
		}
	}
}

// checkLoopSeries checks the config versions, the loop-wide series against
// l's Metrics, and that every family is selfimprove_ with a help text.
func checkLoopSeries(t *testing.T, fams map[string]*dto.MetricFamily, l *si.Loop) {
	t.Helper()
	gauge := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			out[labelValue(m, "agent")] = m.GetGauge().GetValue()
		}
		return out
	}
	if v := gauge("selfimprove_config_version"); v["plain"] != float64(l.Config("plain").Version) || v["plain"] != 2 || len(v) != 4 {
		t.Errorf("config versions %v", v)
	}
	mm := l.Metrics()
	for name, want := range map[string]int64{
		"selfimprove_agents_loaded":         mm.Agents,
		"selfimprove_store_errors_total":    mm.StoreErrors,
		"selfimprove_notify_dropped_total":  mm.NotifyDropped,
		"selfimprove_agent_evictions_total": mm.Evictions,
		"selfimprove_agents_aggregated":     1,
	} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s: %v", name, f)
			continue
		}
		m := f.GetMetric()[0]
		if got := m.GetGauge().GetValue() + m.GetCounter().GetValue(); got != float64(want) {
			t.Errorf("%s = %v, want %d", name, got, want)
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "selfimprove_") || f.GetHelp() == "" {
			t.Errorf("family %s: help %q", name, f.GetHelp())
		}
	}
}
