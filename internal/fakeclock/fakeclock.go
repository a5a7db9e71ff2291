// Package fakeclock provides a manually advanced clock for tests and
// simulations.
package fakeclock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is a clock that moves only when told. It is safe for concurrent
// use.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*timer
}

// timer is a call armed with AfterFunc.
type timer struct {
	at time.Time
	f  func()
}

// New returns a clock that reads t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d, and then calls, in the calling
// goroutine, the functions armed with AfterFunc whose time has come,
// earliest first.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	var due []*timer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.t) {
			keep = append(keep, t)
		} else {
			due = append(due, t)
		}
	}
	clear(c.timers[len(keep):])
	c.timers = keep
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *timer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.f()
	}
}

// AfterFunc arms f to be called once the clock has moved d on (by
// Advance or Sleep). stop disarms it and reports whether it did: false
// once f was called or stop was called before.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	t := &timer{f: f}
	c.mu.Lock()
	t.at = c.t.Add(d)
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.timers {
			if x == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Timers returns how many functions armed with AfterFunc wait for their
// time.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Sleep advances the clock by d at once, unless ctx has ended.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
