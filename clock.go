package selfimprove

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the loop the time. Every time the loop uses comes from it,
// each call's duration included (taken as the difference of two readings,
// so a clock whose readings carry Go's monotonic clock measures durations
// immune to wall-clock steps). Windows, cooldowns and stored times use the
// wall-clock part. Deadlines and backoff waits are timers of the Go
// runtime; under testing/synctest they run on the bubble's fake time.
//
// A Clock may also have a method Sleep(ctx context.Context, d
// time.Duration) error that waits d, or until ctx ends and then returns
// ctx's error. The loop waits between attempts with it, so a simulated
// clock can advance itself instead of waiting. Without it the loop waits
// on a runtime timer.
//
// A Clock may also have a method AfterFunc(d time.Duration, f func())
// (stop func() bool) that calls f once the clock has moved d on, unless
// stop was called first (stop reports whether it stopped the call). The
// loop arms the first-token deadline (Config.FirstTokenTimeout) with it,
// so that a simulated clock fires it when it advances. Without it the
// deadline is a runtime timer.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// monoClock gives a call its two readings with the default clock from the
// monotonic clock alone: a reading of it costs half a time.Now, which
// reads the wall clock too. Durations are exact. End times are base's wall
// time plus the monotonic time since, corrected by the wall clock's drift
// from it (a step, or a suspended machine), which the clock measures with
// a time.Now at most once every wallCheck of calls.
type monoClock struct {
	base    time.Time    // a reading of time.Now, with its monotonic part
	baseN   int64        // base's wall time, Unix nanoseconds
	skew    atomic.Int64 // wall time minus baseN plus the monotonic time since base
	checked atomic.Int64 // monotonic time since base at the last measure of skew
}

// wallCheck is how often, at most, a monoClock measures the wall clock.
const wallCheck = time.Second

func newMonoClock(base time.Time) monoClock { return monoClock{base: base, baseN: base.UnixNano()} }

// offset is a reading: the monotonic time since base, in nanoseconds.
func (m *monoClock) offset() int64 { return int64(time.Since(m.base)) }

// since returns the end time (Unix nanoseconds) and the duration of a call
// that started at start, a reading of offset.
func (m *monoClock) since(start int64) (int64, time.Duration) {
	end := int64(time.Since(m.base))
	if end-m.checked.Load() >= int64(wallCheck) {
		m.measure(end)
	}
	return m.baseN + end + m.skew.Load(), time.Duration(end - start)
}

// measure sets skew from a time.Now, off nanoseconds after base on the
// monotonic clock.
func (m *monoClock) measure(off int64) {
	m.checked.Store(off)
	m.skew.Store(time.Now().UnixNano() - m.baseN - off)
}

// coarseClock is the clock of WithCoarseClock: its readings come from a
// value that a goroutine refreshes every resolution while the clock is
// read. A reading costs a few atomic loads instead of a clock read. When
// nothing has read the clock for idleTicks ticks, the goroutine stops, and
// the next reading starts it again (that reading is taken afresh), so an
// idle Loop runs no timer. Readings carry the monotonic clock: durations
// are immune to wall-clock steps, and exact to within the resolution.
type coarseClock struct {
	res   time.Duration
	base  time.Time    // a reading of time.Now, with its monotonic part
	baseN int64        // base's wall time, Unix nanoseconds
	off   atomic.Int64 // time.Since(base) at the last refresh

	used    atomic.Bool // read since the last tick
	running atomic.Bool // the refresher runs

	mu     sync.Mutex // guards closed and the refresher's start
	closed bool
	done   chan struct{} // closed when the refresher exits; nil before it starts
}

// idleTicks is how many ticks without a reading stop the refresher.
const idleTicks = 64

func newCoarseClock(res time.Duration) *coarseClock {
	now := time.Now()
	return &coarseClock{res: res, base: now, baseN: now.UnixNano()}
}

// Now returns the last refreshed reading, starting the refresher if it is
// stopped.
func (c *coarseClock) Now() time.Time { return c.base.Add(time.Duration(c.offset())) }

// offset is Now as nanoseconds after base.
func (c *coarseClock) offset() int64 {
	if !c.running.Load() {
		c.wake()
	} else if !c.used.Load() {
		c.used.Store(true)
	}
	return c.off.Load()
}

// wake takes a fresh reading and starts the refresher (not after close).
func (c *coarseClock) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off.Store(int64(time.Since(c.base)))
	if c.closed || c.running.Load() {
		return
	}
	if c.done != nil {
		<-c.done // the last refresher has stopped (it was about to)
	}
	c.used.Store(true)
	c.running.Store(true)
	done := make(chan struct{})
	c.done = done
	go c.refresh(done)
}

func (c *coarseClock) refresh(done chan struct{}) {
	defer close(done)
	t := time.NewTicker(c.res)
	defer t.Stop()
	for idle := 0; idle < idleTicks; {
		<-t.C
		c.off.Store(int64(time.Since(c.base)))
		if c.used.Swap(false) {
			idle = 0
		} else {
			idle++
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			break
		}
	}
	c.running.Store(false)
}

// close stops the refresher for good; later readings are taken afresh.
func (c *coarseClock) close() {
	c.mu.Lock()
	c.closed = true
	done := c.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}
