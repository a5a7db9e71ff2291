package benchmarks

import (
	"context"
	"errors"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
)

// errTypical is a 200-byte error as an LLM API returns it.
var errTypical = errors.New(`error code: 429 - {'error': {'message': 'Rate limit reached for gpt-4o in org-7f3a9c on tokens per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s.', 'code': 'rate_limit'}}`)

//go:noinline
func failTypical(context.Context, si.Config) error { return errTypical }

// BenchmarkClassifySignature: classifying and signing one typical error,
// as the loop does for every failure (the loop scrubs the text once and
// signs it into a stack buffer; Signature scrubs again and allocates its
// result).
func BenchmarkClassifySignature(b *testing.B) {
	msg := errTypical.Error()
	b.Run("both", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = failure.Classify(errTypical)
			_ = failure.Signature(msg)
		}
	})
	b.Run("classify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = failure.Classify(errTypical)
		}
	})
	b.Run("signature", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = failure.Signature(msg)
		}
	})
	b.Run("scrub", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = failure.Scrub(msg)
		}
	})
}

// BenchmarkFailureTypical: a failed call with the typical 200-byte error,
// during the cooldown: the core failure path plus classifying, signing
// and clustering. Compare with DirectFailure and FailureCooldown.
func BenchmarkFailureTypical(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	for range si.DefaultMinBeforeCalls { // cross the threshold once (a new agent waits for 10 calls)
		l.ExecuteWithImprovement(ctx, "agent", failTypical)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", failTypical)
	}
}
