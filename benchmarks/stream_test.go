package benchmarks

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/stream"
)

// streamed is a wrapped function whose stream reports its first token at
// once.
//
//go:noinline
func streamed(ctx context.Context, _ si.Config) error {
	stream.FirstToken(ctx)
	return nil
}

// BenchmarkSuccessStreamed is a successful call under a FirstTokenTimeout
// whose fn reports its first token: the cost of the first-token deadline
// (its context, its timer) and of counting the time to first token, over
// BenchmarkSuccess.
func BenchmarkSuccessStreamed(b *testing.B) {
	l := newLoop(b, si.WithDefaultConfig(si.Config{FirstTokenTimeout: 10 * time.Second}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", streamed)
	}
}
