package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func TestMetricsText(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, MaxAgentSeries: 2})
	traffic(t, f.l, f.clk, "q\"uote\\back\nline", 3, 0)
	traffic(t, f.l, f.clk, "bad\xffutf8", 2, 0)
	code, b := f.do(t, "GET", "/metrics", token, "", "")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	text := string(b)
	for _, want := range []string{
		"# TYPE selfimprove_calls_total counter\n",
		`selfimprove_calls_total{agent="alpha",outcome="success"} 20` + "\n",
		`selfimprove_calls_total{agent="alpha",outcome="failure"} 4` + "\n",
		`selfimprove_call_duration_seconds_bucket{agent="alpha",le="0.025"} 23` + "\n",
		`selfimprove_call_duration_seconds_bucket{agent="alpha",le="+Inf"} 24` + "\n",
		`selfimprove_call_duration_seconds_count{agent="alpha"} 24` + "\n",
		fmt.Sprintf("selfimprove_config_version{agent=\"alpha\"} %d\n", f.l.Config("alpha").Version),
		// "bad\xff…" sorts second; beta and "q…" are summed.
		`selfimprove_calls_total{agent="bad\\xFFutf8",outcome="success"} 2` + "\n",
		`selfimprove_calls_total{agent="_other",outcome="success"} 23` + "\n",
		"selfimprove_agents_aggregated 2\n",
		fmt.Sprintf("selfimprove_changes_total{result=\"applied\"} %d\n", f.l.Metrics().Improvements),
		"selfimprove_agents_loaded 4\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(text, `selfimprove_config_version{agent="_other"}`) {
		t.Error("config version for _other")
	}

	// Label escaping, and bytes that are not UTF-8.
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	admin.WriteMetrics(w, f.l, 10)
	w.Flush()
	text = buf.String()
	for _, want := range []string{`agent="q\"uote\\back\nline"`, `agent="bad\\xFFutf8"`} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	if !utf8Valid(text) {
		t.Error("not UTF-8")
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }

// BenchmarkMetrics10k renders /metrics for 10,000 agents in memory.
func BenchmarkMetrics10k(b *testing.B) {
	for _, series := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			l, _ := newLoop(b, si.WithMaxAgents(20000), si.WithStrategy(nil))
			for i := range 10000 {
				l.ExecuteWithImprovement(b.Context(), fmt.Sprintf("agent-%05d", i), func(context.Context, si.Config) error { return nil })
			}
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				w := bufio.NewWriterSize(&buf, 64<<10)
				admin.WriteMetrics(w, l, series)
				w.Flush()
			}
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
}

// BenchmarkMetricsHandler10k serves GET /metrics for 10,000 agents in memory.
func BenchmarkMetricsHandler10k(b *testing.B) {
	for _, series := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			l, _ := newLoop(b, si.WithMaxAgents(20000), si.WithStrategy(nil))
			for i := range 10000 {
				l.ExecuteWithImprovement(b.Context(), fmt.Sprintf("agent-%05d", i), func(context.Context, si.Config) error { return nil })
			}
			h := admin.Handler(l, admin.Options{OpenMetrics: true, MaxAgentSeries: series})
			req := httptest.NewRequest("GET", "http://localhost/metrics", nil)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
