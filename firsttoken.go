package selfimprove

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/firsttoken"
)

// The first-token deadline (Config.FirstTokenTimeout).
//
// An attempt of a config with a FirstTokenTimeout runs under a watch: its
// context, which carries the watch under firsttoken.Key (package stream
// reports the first token to it), and which the watch cancels with
// failure.ErrFirstTokenTimeout when the deadline passes first. The
// deadline is a runtime timer, or the Clock's AfterFunc when it has one.
// A config without one runs as before: no watch, no timer, nothing
// allocated.

// The states of a watch.
const (
	watchWaiting uint32 = iota // no first token yet
	watchStarted               // the first token came in time
	watchStalled               // the deadline passed first: the attempt was cancelled
)

// watch is an attempt's context while the loop waits for its first token.
type watch struct {
	context.Context
	cancel context.CancelCauseFunc
	l      *Loop
	start  reading
	state  atomic.Uint32
	first  atomic.Int64 // the time to first token, ns (at least 1)
	stop   func() bool  // disarms the deadline
}

// Value returns the watch itself for firsttoken.Key.
func (w *watch) Value(k any) any {
	if k == (firsttoken.Key{}) {
		return w
	}
	return w.Context.Value(k)
}

// FirstToken implements firsttoken.Watch: the first call in time records
// the time to first token and disarms the deadline.
func (w *watch) FirstToken() {
	if w.state.Load() != watchWaiting {
		return
	}
	_, d := w.l.since(w.start)
	w.first.Store(int64(max(d, 1)))
	if w.state.CompareAndSwap(watchWaiting, watchStarted) {
		w.stop()
	}
}

// stall cancels the attempt when no first token came.
func (w *watch) stall() {
	if w.state.CompareAndSwap(watchWaiting, watchStalled) {
		w.cancel(failure.ErrFirstTokenTimeout)
	}
}

// timerClock is the optional method of a Clock that arms a timer (see
// Clock).
type timerClock interface {
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// afterFunc calls f once d has passed on the loop's clock, and returns
// the function that disarms it.
func (l *Loop) afterFunc(d time.Duration, f func()) func() bool {
	if c, ok := l.clock.(timerClock); ok {
		return c.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

// runWatched runs fn once under cfg's deadlines: the attempt's Timeout
// and its FirstTokenTimeout. It counts the attempt's time to first token
// for its agent, or notes in b that it stalled before one and failed (b
// is nil for a call the loop does not record).
func (l *Loop) runWatched(ctx context.Context, cfg *Config, fn func(context.Context, Config) error, b *begun) error {
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	if b != nil {
		b.stalled = false
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &watch{Context: cctx, cancel: cancel, l: l, start: l.now()}
	w.stop = l.afterFunc(cfg.FirstTokenTimeout, w.stall)
	defer w.stop()
	err := fn(w, *cfg)
	if b != nil {
		switch w.state.Load() {
		case watchStarted:
			if v, ok := l.agents.Load(b.id); ok {
				v.(*agent).tel.observeFirstToken(time.Duration(w.first.Load()))
			}
		case watchStalled:
			b.stalled = err != nil
		}
	}
	return err
}
