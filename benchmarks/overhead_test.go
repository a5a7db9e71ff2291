// Package benchmarks measures the loop's overhead against a direct call of
// the same function, in the same run:
//
//	go test ./benchmarks -run '^$' -bench . -benchmem -count 6 -cpu 1,2
//
// The overhead of a case is its ns/op minus that of the matching Direct
// benchmark. See docs/performance.md for the measured table.
package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

//go:noinline
func work(context.Context, si.Config) error { return nil }

var errUpstream = errors.New("upstream: 503 service unavailable")

//go:noinline
func fail(context.Context, si.Config) error { return errUpstream }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func newLoop(b testing.TB, opts ...si.Option) *si.Loop {
	b.Helper()
	// Tracking only, as the core benchmarks measure; analysis_test.go
	// measures the built-in strategy. The transient floor is off: a
	// failing call is measured as one attempt, not as its backoff.
	return newLoopOn(b, si.WithDir(b.TempDir()), opts...)
}

// newLoopOn is newLoop on the store that where gives (WithDir or
// WithStore: New refuses both).
func newLoopOn(b testing.TB, where si.Option, opts ...si.Option) *si.Loop {
	b.Helper()
	base := []si.Option{where, si.WithNotifier(nil), si.WithLogger(discard), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1})}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkDirect is the baseline: the wrapped function called directly.
func BenchmarkDirect(b *testing.B) {
	ctx := context.Background()
	var cfg si.Config
	b.ReportAllocs()
	for b.Loop() {
		_ = work(ctx, cfg)
	}
}

// BenchmarkDirectFailure is the baseline of the failure cases.
func BenchmarkDirectFailure(b *testing.B) {
	ctx := context.Background()
	var cfg si.Config
	b.ReportAllocs()
	for b.Loop() {
		_ = fail(ctx, cfg)
	}
}

// BenchmarkSuccess is the hot path: a successful call, no change verifying.
func BenchmarkSuccess(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}

// BenchmarkSuccessNoCallScores is the hot path of a Loop made
// WithCallScores(false): its calls carry no score slot.
func BenchmarkSuccessNoCallScores(b *testing.B) {
	l := newLoop(b, si.WithCallScores(false))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}

// BenchmarkSuccessCoarse is the hot path with WithCoarseClock(1ms): no
// clock read, three atomic loads instead.
func BenchmarkSuccessCoarse(b *testing.B) {
	l := newLoop(b, si.WithCoarseClock(time.Millisecond))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}

// BenchmarkFailureCooldown: a failed call while the agent cools down after
// an analysis (the common case during an incident).
func BenchmarkFailureCooldown(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	for range si.DefaultMinBeforeCalls { // cross the threshold once (a new agent waits for 10 calls): the cooldown starts
		l.ExecuteWithImprovement(ctx, "agent", fail)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", fail)
	}
}

// BenchmarkFailureBelowThreshold: a failed call that runs the whole trigger
// check (profile, window, failure ring) and stays below the threshold: the
// most work a failure does without triggering.
func BenchmarkFailureBelowThreshold(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	// 64 failures within 1ns never happen: every failure is checked, none
	// triggers.
	if err := l.SetThreshold("agent", si.Threshold{Failures: si.MaxThresholdFailures, Window: 1}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rep, _ := l.ExecuteWithImprovement(ctx, "agent", fail)
		if rep.ImprovementTriggered {
			b.Fatal("triggered")
		}
	}
}

// BenchmarkHistory shows that the cost of a call does not depend on how
// many calls the agent made before (10% of them failed).
func BenchmarkHistory(b *testing.B) {
	for _, n := range []int{100, 1_000_000} {
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			l := newLoop(b)
			ctx := context.Background()
			for i := range n {
				fn := work
				if i%10 == 0 {
					fn = fail
				}
				l.ExecuteWithImprovement(ctx, "agent", fn)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
			}
		})
	}
}

// BenchmarkParallel runs successful calls from all Ps over 1,000 agents,
// and over one busy agent, with the direct call as the baseline.
func BenchmarkParallel(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var cfg si.Config
			for pb.Next() {
				_ = work(ctx, cfg)
			}
		})
	})
	for _, agents := range []int{1, 1000} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			l := newLoop(b)
			ids := make([]string, agents)
			for i := range ids {
				ids[i] = fmt.Sprintf("agent-%04d", i)
				l.ExecuteWithImprovement(context.Background(), ids[i], work)
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := int(next.Add(7919)) // each goroutine starts elsewhere
				for pb.Next() {
					i++
					_, _ = l.ExecuteWithImprovement(ctx, ids[i%agents], work)
				}
			})
		})
	}
}

// BenchmarkMemoryPerAgent reports the heap each live agent takes, with few
// and with many calls behind it: typically (its failures share an error
// value) and in the worst case (each kept failure has a distinct error text
// of the longest kept length).
func BenchmarkMemoryPerAgent(b *testing.B) {
	for _, distinct := range []bool{false, true} {
		for _, calls := range []int{100, 10_000} {
			b.Run(fmt.Sprintf("distinct-errors=%v/calls=%d", distinct, calls), func(b *testing.B) {
				if testing.Short() && calls > 100 {
					// 3,000,000 calls; TestMemoryPerAgentBounded checks
					// that memory does not grow with calls.
					b.Skip("-short: 100 calls an agent only")
				}
				var perAgent float64
				for b.Loop() {
					perAgent = agentMemory(b, 300, calls, distinct)
				}
				b.ReportMetric(perAgent, "B/agent")
			})
		}
	}
}

// agentMemory returns the heap bytes per agent of a loop holding n agents
// that made calls calls each, half of them failures; distinct gives each
// failure its own error text.
func agentMemory(b testing.TB, n, calls int, distinct bool) float64 {
	b.Helper()
	// The loop-wide failure memory is measured on its own
	// (TestMemoryPerClusterBounded); here it keeps 64 clusters.
	l := newLoop(b, si.WithFlushInterval(0), si.WithMemory(si.MemoryOptions{MaxClusters: 64}))
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%06d", i)
	}
	long := strings.Repeat("x", 300)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, id := range ids {
		for c := range calls {
			if c%2 == 0 {
				l.ExecuteWithImprovement(ctx, id, work)
				continue
			}
			err := errUpstream
			if distinct {
				// A signature of its own for each failure (letters, not
				// numbers), cut to the kept length: every cluster slot
				// fills with the longest texts.
				err = fmt.Errorf("%s %d %s", letters(c), i, long)
			}
			l.ExecuteWithImprovement(ctx, id, func(context.Context, si.Config) error { return err })
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// letters spells n in base 26.
func letters(n int) string {
	b := []byte{byte('a' + n%26)}
	for n /= 26; n > 0; n /= 26 {
		b = append(b, byte('a'+n%26))
	}
	return string(b)
}

// TestMemoryPerAgentBounded checks the per-agent memory bound and that it
// does not grow with the agent's call count. It measures bytes, not time.
// In the worst case every failure has a signature of its own and a
// 200-byte text: the agent's 8 cluster slots and 16 kept failures hold
// the longest texts, and the loop-wide index of shared causes fills up
// (1,024 signatures, here shared by the 300 agents).
func TestMemoryPerAgentBounded(t *testing.T) {
	// After 1,000 calls (500 failures) every ring and table is full;
	// more calls must not add a byte.
	if raceEnabled {
		// One goroutine's calls, measured in bytes: the detector checks
		// nothing here and makes each failure 20× slower (78 s on 2
		// cores). CI runs it without -race.
		t.Skip("a memory measurement: it runs without -race (go test -run TestMemoryPerAgentBounded ./benchmarks; .ci/run runs it so)")
	}
	const calls = 3000
	few := agentMemory(t, 300, 1000, true)
	many := agentMemory(t, 300, calls, true)
	t.Logf("bytes per agent: %.0f after 1,000 calls, %.0f after %d calls", few, many, calls)
	if many > 12<<10 {
		t.Errorf("an agent takes %.0f bytes, want at most 12 KiB", many)
	}
	if many > few*1.1 {
		t.Errorf("memory grows with calls: %.0f B after 1,000 calls, %.0f B after %d", few, many, calls)
	}
}

// TestMemoryPerClusterBounded measures the failure memory: bytes per
// remembered cluster, each failure a 120-rune signature of its own seen on
// 8 agents, and that a full memory does not grow.
func TestMemoryPerClusterBounded(t *testing.T) {
	max := 5000
	if raceEnabled {
		max = 1000 // the race detector makes each failure 20× slower
	}
	measure := func(failures int) float64 {
		l := newLoop(t, si.WithFlushInterval(0), si.WithMemory(si.MemoryOptions{MaxClusters: max}))
		ctx := context.Background()
		long := strings.Repeat("y", 300)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range failures {
			err := fmt.Errorf("%s failed %s", letters(i), long)
			for a := range 8 {
				l.ExecuteWithImprovement(ctx, fmt.Sprintf("agent-%d", a), func(context.Context, si.Config) error { return err })
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(l)
		return float64(after.HeapAlloc-before.HeapAlloc) / float64(max)
	}
	full, over := measure(max), measure(3*max)
	t.Logf("bytes per remembered cluster: %.0f when full, %.0f after 3× as many clusters", full, over)
	if over > 2048 {
		t.Errorf("a remembered cluster takes %.0f bytes, want at most 2 KiB", over)
	}
	if over > full*1.25 {
		t.Errorf("a full memory grows: %.0f → %.0f bytes per cluster", full, over)
	}
}

// TestNoTriggerInBenchmarkSetups guards the benchmarks' premises.
func TestNoTriggerInBenchmarkSetups(t *testing.T) {
	l := newLoop(t)
	ctx := context.Background()
	for range si.DefaultMinBeforeCalls { // a new agent waits for 10 calls
		l.ExecuteWithImprovement(ctx, "agent", fail)
	}
	for range 100 {
		if rep, _ := l.ExecuteWithImprovement(ctx, "agent", fail); rep.ImprovementTriggered {
			t.Fatal("a failure during the cooldown triggered")
		}
	}
}
