package benchmarks

import (
	"context"
	"fmt"
	"sync"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// discardTraces is a RAMStore that drops traces: with it, a benchmark
// measures what a call pays to hand its trace over, and nothing of the
// writer's work.
type discardTraces struct{ *si.RAMStore }

func (discardTraces) AppendTraces([]si.Trace) error { return nil }

// BenchmarkTracesBatched is the success path with the trace log on in
// batched mode: the call hands its trace to the writer, which encodes and
// fsyncs batches on its own goroutine.
//
//   - handoff: what the call pays (the writer's store discards).
//   - file: the closed loop against the file store with default rotation.
//     At this rate, ~3M traced calls/s, it writes ~400 MB/s of JSON and
//     measures this machine's disk and its second core, which the writer
//     and the archive compression share.
func BenchmarkTracesBatched(b *testing.B) {
	for _, tc := range []struct {
		name string
		opt  si.Option
	}{
		{"handoff", si.WithStore(discardTraces{si.NewRAMStore()})},
		{"file", nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			where := tc.opt
			if where == nil {
				where = si.WithDir(b.TempDir())
			}
			l := newLoopOn(b, where, si.WithTraces(si.TracesBatched))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
			}
			b.StopTimer()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			if m := l.Metrics(); m.TracesDropped != 0 || m.Traces == 0 {
				b.Fatalf("metrics %+v", m)
			}
		})
	}
}

// BenchmarkTracesSync: each call returns after its trace is fsynced; with
// many callers, one fsync serves a whole batch (group commit).
func BenchmarkTracesSync(b *testing.B) {
	b.Run("callers=1", func(b *testing.B) {
		l := newLoop(b, si.WithTraces(si.TracesSync))
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	})
	b.Run("callers=64", func(b *testing.B) {
		l := newLoop(b, si.WithTraces(si.TracesSync))
		b.SetParallelism((64 + runtimeProcs() - 1) / runtimeProcs())
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	})
}

// BenchmarkRecovery opens a directory of 10,000 agents and makes the first
// call of each: the cost of a restart until every agent is back.
func BenchmarkRecovery(b *testing.B) {
	agents := 10_000
	if testing.Short() {
		agents = 1_000 // CI's one pass: the setup's 20,000 fsyncs take half a minute
	}
	dir := b.TempDir()
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%05d", i)
	}
	setup, err := si.New(si.WithDir(dir), si.WithNotifier(nil), si.WithLogger(discard), si.WithMaxAgents(agents))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 16 { // save in parallel: each save is two fsyncs
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < agents; i += 16 {
				if err := setup.SetConfig(ids[i], si.Config{MaxAttempts: 2, Route: "r"}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	setup.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := si.New(si.WithDir(dir), si.WithNotifier(nil), si.WithLogger(discard), si.WithMaxAgents(agents))
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			if rep, _ := l.ExecuteWithImprovement(ctx, id, work); rep.ConfigVersion != 2 || rep.LoopErr != nil {
				b.Fatalf("%s: %+v", id, rep)
			}
		}
		b.StopTimer()
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N)/float64(agents), "µs/agent")
}
