package selfimprove

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkEmit measures what a call pays to hand an event to the
// notifier queue: when it has room, and when it is full because the
// notifier hangs, from all Ps.
func BenchmarkEmit(b *testing.B) {
	ev := Event{ID: "01a20262-08f4-77dc-90fc-c7fb6fa3a960", Time: time.Now(), Type: EventImprovementApplied, AgentID: "agent", Message: "agent \"agent\": applied config v2 (was v1)"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.Run("room", func(b *testing.B) {
		// The worker is parked in the first delivery; every 1,000 events
		// the queue is emptied, off the clock, so that each send finds
		// room.
		m := new(metrics)
		block := make(chan struct{})
		d := newDispatcher([]Notifier{NotifierFunc(func(context.Context, Event) error { <-block; return nil })}, quiet,
			NotifyOptions{Queue: 1024, BurstLimit: -1, Timeout: time.Hour}, m)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if i%1000 == 999 {
				b.StopTimer()
				d.take(true)
				b.StartTimer()
			}
			d.send(ev)
		}
		b.StopTimer()
		if m.notifyDropped.Load() != 0 {
			b.Fatal("dropped")
		}
		close(block)
		d.close(context.Background())
	})
	b.Run("full", func(b *testing.B) {
		// The notifier hangs and the queue is full: every event is
		// dropped, counted and (at most once a second) logged.
		m := new(metrics)
		block := make(chan struct{})
		d := newDispatcher([]Notifier{NotifierFunc(func(context.Context, Event) error { <-block; return nil })}, quiet,
			NotifyOptions{Queue: 1024, BurstLimit: -1, Timeout: time.Hour}, m)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d.send(ev)
			}
		})
		b.StopTimer()
		close(block)
		d.close(context.Background())
	})
}
