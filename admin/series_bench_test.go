package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// BenchmarkSampleAll measures a sample of every agent, a minute apart:
// 1,000 agents whose calls are scored (or not), per agent.
func BenchmarkSampleAll(b *testing.B) {
	for _, scored := range []bool{false, true} {
		b.Run(fmt.Sprintf("scored=%v", scored), func(b *testing.B) {
			clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			l, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithClock(clk), selfimprove.WithNotifier(nil),
				selfimprove.WithFlushInterval(0), selfimprove.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const n = 1000
			for i := range n {
				l.ExecuteWithImprovement(context.Background(), fmt.Sprintf("a%04d", i), func(ctx context.Context, _ selfimprove.Config) error {
					if scored {
						return l.AddScore(ctx, 0.5)
					}
					return nil
				})
			}
			s := &server{l: l, o: Options{Now: clk.Now, SampleEvery: -1}.withDefaults()}
			s.samples.agents, s.samples.max = map[string]*timeline{}, 10000
			s.sampleAll(true)
			b.ResetTimer()
			for range b.N {
				clk.Advance(time.Minute)
				s.sampleAll(true)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/agent")
		})
	}
}
