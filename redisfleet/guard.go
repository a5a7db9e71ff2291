package redisfleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
)

// What keeps the fleet's promises whatever the client's settings: every
// operation returns by its context's deadline (do), only the errors of a
// Redis that cannot be reached say so (fail), the server's clock as seen
// from here (srvClock, for the commit's deadline), and the check of the
// user's rights (Check).

// maxAgentID bounds an agent ID stored in Redis.
const maxAgentID = si.MaxAgentIDLen

// do runs fn and returns its error, or the context's error once its
// deadline passed, whether or not fn returned: go-redis applies a
// context's deadline to the socket only with ContextTimeoutEnabled, and
// otherwise waits for its ReadTimeout (3 s by default). fn goes on in the
// background until the client gives up; what it sets must be read only
// when do returns nil.
func (f *Fleet) do(ctx context.Context, fn func(context.Context) error) error {
	if ctx.Done() == nil {
		return fn(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unreachable reports whether err says that Redis could not be reached
// or could not serve: a network error, a timeout, or a reply that says
// the server is loading, busy, failing over or that the cluster is down.
// Other replies (the user's rights, a key of the wrong type, a script's
// error) are not: trying again will not help, and they are not reported
// as the fleet being down.
func unreachable(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// fail wraps a Redis error of op: with si.ErrFleetUnavailable when Redis
// could not be reached.
func fail(op string, err error) error {
	if unreachable(err) {
		return fmt.Errorf("redisfleet: %s: %w: %w", op, si.ErrFleetUnavailable, err)
	}
	return fmt.Errorf("redisfleet: %s: %w", op, err)
}

// srvClock is the server's clock as last seen: its time (µs) in an answer
// received at at (monotonic).
type srvClock struct {
	mu  sync.Mutex
	us  int64
	at  time.Time
	set bool
}

// saw records that an answer received at at carried the server time us.
func (c *srvClock) saw(us int64, at time.Time) {
	c.mu.Lock()
	c.us, c.at, c.set = us, at, true
	c.mu.Unlock()
}

// clockFresh is how old a reading of the server's clock may be for a
// commit's deadline; an older one is read again first.
const clockFresh = 2 * time.Second

// deadline returns the server time (µs) after which a commit with the
// context deadline dl must not land, from a reading of the server's
// clock: the reading was taken before its answer arrived (at), so the
// server's time when this replica's clock shows dl is at least
// us + (dl - at). The commit must land by dl minus a reply allowance (a
// tenth of the time left, at least 1 ms), so that its answer can arrive
// by dl, less 0.1 % for the clocks' drift and 1 ms. It reports false
// without a reading fresher than clockFresh.
func (c *srvClock) deadline(dl, now time.Time) (int64, bool) {
	c.mu.Lock()
	us, at, set := c.us, c.at, c.set
	c.mu.Unlock()
	if !set || now.Sub(at) > clockFresh || now.Before(at) {
		return 0, false
	}
	left := dl.Sub(now)
	allow := max(left/10, time.Millisecond)
	span := dl.Sub(at) - allow
	span -= span/1000 + time.Millisecond
	return us + span.Microseconds(), true
}

// serverTime reads the server's clock.
func (f *Fleet) serverTime(ctx context.Context) error {
	var t time.Time
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		t, err = f.c.Time(ctx).Result()
		return err
	})
	if err != nil {
		return fail("time", err)
	}
	f.clock.saw(t.UnixMicro(), time.Now())
	return nil
}

// timeOf reads a TIME reply {seconds, microseconds}.
func timeOf(v any) (int64, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, false
	}
	s, _ := a[0].(string)
	u, _ := a[1].(string)
	sec, err1 := strconv.ParseInt(s, 10, 64)
	usec, err2 := strconv.ParseInt(u, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return sec*1_000_000 + usec, true
}

// Check runs, on keys of the prefix, each command the fleet's scripts use,
// and publishes on its channel, to find what the Redis user lacks. New
// calls it (for up to a second) and refuses a user that lacks a right;
// call it again at any time. Its error names what was refused; the ACL a
// replica needs is in docs/fleet.md:
//
//	ACL SETUSER <user> on >... ~<prefix>* &<prefix>changes +@read +@write +@scripting +@stream +@pubsub +time +ping
func (f *Fleet) Check(ctx context.Context) error {
	k := f.opts.Prefix + "{check}:"
	err := f.do(ctx, func(ctx context.Context) error {
		err := checkScript.Run(ctx, f.c, []string{k + "h", k + "l", k + "s", k + "h-bad"}, f.channel()).Err()
		if err != nil {
			return err
		}
		pipe := f.c.Pipeline()
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: k + "x", MaxLen: 1, Approx: true, Values: []any{"e", "{}"}})
		pipe.XRevRangeN(ctx, k+"x", "+", "-", 1)
		pipe.Del(ctx, k+"x")
		pipe.Time(ctx)
		_, err = pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("redisfleet: check of the Redis user's rights on prefix %q: %w", f.opts.Prefix, fail("check", err))
	}
	return nil
}
