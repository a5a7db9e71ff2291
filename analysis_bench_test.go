package selfimprove

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkAnalysis10k measures a full analysis of an agent with 10,000
// failures in its window, spread over more signatures than it keeps: the
// evidence the loop gathers under the agent's lock (stats, recent
// failures, clusters, health), the shared causes across 1,000 other
// agents, and the built-in strategy's decision.
func BenchmarkAnalysis10k(b *testing.B) {
	l, err := New(WithStore(NewRAMStore()), WithNotifier(nil), WithStrategy(nil), WithFlushInterval(0),
		WithRetryPolicy(RetryPolicy{TransientAttempts: 1})) // the analysis, not the floor's backoff
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 10_000 {
		err := fmt.Errorf("upstream %d timed out after %dms (kind %d)", i, i%977, i%12)
		l.ExecuteWithImprovement(ctx, "agent", func(context.Context, Config) error { return err })
	}
	for i := range 1000 { // fill the shared index
		err := fmt.Errorf("other failure %c%c", 'a'+i%26, 'a'+i/26%26)
		l.ExecuteWithImprovement(ctx, fmt.Sprintf("other-%d", i), func(context.Context, Config) error { return err })
	}
	a, _ := l.agent("agent")
	s := &BuiltinStrategy{}
	b.ReportAllocs()
	for b.Loop() {
		now := l.clock.Now()
		a.mu.Lock()
		th, prof := a.s.threshold(now.UnixNano())
		an := a.s.analysis(now, th, prof)
		a.mu.Unlock()
		an.Shared = l.shared.causes(now.UnixNano(), a.id, true)
		tw, _ := s.Analyze(ctx, *an)
		if tw == nil || an.Stats.Failures != 10_000 {
			b.Fatalf("tweak %v, %d failures", tw, an.Stats.Failures)
		}
	}
	_ = time.Second
}
