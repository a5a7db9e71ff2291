package benchmarks

import (
	"context"
	"testing"

	"github.com/self-improving-loop/selfimprove"
)

//go:noinline
func work(ctx context.Context, cfg selfimprove.Config) error { return nil }

func BenchmarkDirect(b *testing.B) {
	b.ReportAllocs()
	ctx := context.Background()
	var cfg selfimprove.Config
	for b.Loop() {
		_ = work(ctx, cfg)
	}
}

func BenchmarkSuccess(b *testing.B) {
	l, err := selfimprove.New(selfimprove.WithDir(b.TempDir()), selfimprove.WithNotifier(nil))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}
