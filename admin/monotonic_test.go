package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// scrapeCounters GETs /metrics from srv and returns the samples of the
// families typed counter or histogram (whose _bucket, _count and _sum are
// counters too), by name and labels.
func scrapeCounters(t *testing.T, srv *httptest.Server) map[string]float64 {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	monotonic := map[string]bool{}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if typ, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(typ, " ")
			monotonic[name] = kind == "counter" || kind == "histogram"
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		key := line[:i]
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(key[:strings.IndexAny(key+"{", "{ ")], "_bucket"), "_count"), "_sum"), "_total")
		if !monotonic[family] && !monotonic[family+"_total"] {
			continue
		}
		f, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[key] = f
	}
	return out
}

// TestMetricsCountersNeverGoDownAfterEviction: selfimprove_calls_total is
// a Prometheus counter (as the call duration histogram's buckets, count
// and sum), and a lower value is taken for a reset: rate() and increase()
// report a false spike. An agent's own counts start again from zero when
// it is evicted and loaded again, and _other's sum drops when an agent in
// it is evicted; /metrics exported them as read, so they went down.
func TestMetricsCountersNeverGoDownAfterEviction(t *testing.T) {
	l, clk := newLoop(t, si.WithMaxAgents(2), si.WithStrategy(nil))
	srv := httptest.NewServer(admin.Handler(l, admin.Options{OpenReads: true, MaxAgentSeries: 1}))
	defer srv.Close()
	traffic(t, l, clk, "a", 3, 0) // a has its own series
	traffic(t, l, clk, "b", 4, 0) // b is summed under _other
	before := scrapeCounters(t, srv)
	traffic(t, l, clk, "c", 1, 0) // evicts a (or b): the cap is 2 agents
	traffic(t, l, clk, "a", 1, 0) // a loaded again, from zero
	traffic(t, l, clk, "b", 1, 0)
	after := scrapeCounters(t, srv)
	if l.Metrics().Evictions == 0 {
		t.Fatalf("no agent was evicted: %+v", l.Metrics())
	}
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if v := before[k]; after[k] < v {
			t.Errorf("%s went down from %g to %g", k, v, after[k])
		}
	}
	// 10 calls made; c's one call is not seen: c was loaded and evicted
	// between the two scrapes.
	succ := after[`selfimprove_calls_total{agent="a",outcome="success"}`] + after[`selfimprove_calls_total{agent="_other",outcome="success"}`]
	if succ != 9 {
		t.Errorf("selfimprove_calls_total counts %g successes in all, want the 9 of the agents seen in memory", succ)
	}
}

// TestMetricsConcurrentScrapesCountEachCallOnce: scrapes that overlap
// (two Prometheus servers of a pair) while calls go on count each call
// once: a scrape that read the agents' counts before another took its
// totals would take the lower counts for a reload and count them again.
func TestMetricsConcurrentScrapesCountEachCallOnce(t *testing.T) {
	l, _ := newLoop(t, si.WithStrategy(nil))
	srv := httptest.NewServer(admin.Handler(l, admin.Options{OpenReads: true, MaxAgentSeries: 3000}))
	defer srv.Close()
	const agents, calls = 4, 300
	for i := range agents { // each in memory first: the series stay the same agents'
		traffic(t, l, nil, fmt.Sprintf("agent-%d", i), 1, 0)
	}
	for i := range 500 { // idle agents, which make a scrape longer
		traffic(t, l, nil, fmt.Sprintf("idle-%d", i), 1, 0)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
					if resp, err := srv.Client().Get(srv.URL + "/metrics"); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
		})
	}
	var callers sync.WaitGroup
	for i := range agents {
		callers.Go(func() {
			for range calls - 1 {
				l.ExecuteWithImprovement(t.Context(), fmt.Sprintf("agent-%d", i), func(context.Context, si.Config) error {
					time.Sleep(20 * time.Microsecond)
					return nil
				})
			}
		})
	}
	callers.Wait()
	close(done)
	wg.Wait()
	var sum float64
	got := map[string]float64{}
	for k, v := range scrapeCounters(t, srv) {
		if strings.HasPrefix(k, `selfimprove_calls_total{agent="agent-`) {
			sum += v
			got[k] = v
		}
	}
	if sum != agents*calls {
		t.Errorf("selfimprove_calls_total sums %g calls, want %d: %v", sum, agents*calls, got)
	}
}
