package redisfleet_test

import (
	"context"
	"slices"
	"sync"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// What the fault tests time: each operation's wait on the fleet, and the
// process's own lateness beside it.

// latencies records durations, safe for concurrent use, and what the
// longest was.
type latencies struct {
	mu    sync.Mutex
	d     []time.Duration
	max   time.Duration
	worst string
}

// add records d, the time of what.
func (l *latencies) add(what string, d time.Duration) {
	l.mu.Lock()
	if d > l.max {
		l.max, l.worst = d, what
	}
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// time records the time f takes (an operator method: all of it is the
// Loop's).
func (l *latencies) time(what string, f func()) {
	start := time.Now()
	f()
	l.add(what, time.Since(start))
}

// call records the time the Loop added to a call of fn: the call's time
// but for that from the start of fn's first attempt to the end of its
// last (the attempts and a retry's backoff between them are the call's
// own conduct, set by its config, such as a tweak of MaxAttempts; the
// fleet is waited on before the first attempt and after the last).
func (l *latencies) call(what string, lp *si.Loop, id string, fn func(context.Context, si.Config) error) {
	var first, last time.Time
	start := time.Now()
	lp.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, c si.Config) error {
		if first.IsZero() {
			first = time.Now()
		}
		defer func() { last = time.Now() }()
		return fn(ctx, c)
	})
	d := time.Since(start)
	if !first.IsZero() {
		d -= last.Sub(first)
	}
	l.add(what, d)
}

// stats returns the max and the p99.
func (l *latencies) stats() (worst, p99 time.Duration, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := slices.Clone(l.d)
	slices.Sort(d)
	if len(d) == 0 {
		return 0, 0, 0
	}
	return d[len(d)-1], d[len(d)*99/100], len(d)
}

// lateness samples, until stop, how late a goroutine of this process
// wakes from a 5 ms sleep (scheduling, the race detector, the garbage
// collector, other processes on the machine), and sends the worst.
func lateness(stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				out <- worst
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			worst = max(worst, time.Since(t0)-5*time.Millisecond)
		}
	}()
	return out
}
