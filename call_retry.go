package selfimprove

import (
	"cmp"
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"sync/atomic"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/firsttoken"
)

// run makes the attempts cfg allows, and the call's Budget, if any,
// counting them in *n. It stops at the first success, at a failure the
// retry policy does not retry, or when ctx ends. A panic in fn goes up to
// the caller. A retry's context carries an Attempt (see AttemptInfo).
// The attempts run under att, the call's attempt context (see callCtx),
// made here when the call has none and its config allows retries or its
// agent nests calls (one small allocation a call; a call of one attempt
// otherwise allocates nothing).
func (l *Loop) run(ctx context.Context, cfg *Config, fn func(context.Context, Config) error, n *int, b *begun, att *callCtx) (err error, exhausted bool) {
	*n = 1
	if att == nil && (cfg.attempts() > 1 || b != nil && b.nests) {
		att = &callCtx{Context: ctx}
	}
	actx := ctx
	if att != nil {
		actx = att
		if b != nil {
			b.att = att
		}
	}
	err = l.runOnce(actx, cfg, fn, b)
	if err == nil || ctx.Err() != nil || cfg.attempts() <= 1 && l.retryRules.floor <= 1 {
		return err, false
	}
	return l.retry(ctx, att, cfg, fn, err, n, b)
}

// retry makes the attempts after a failed first one; see run. Each
// attempt's context is att, which wraps ctx, with an Attempt about the one
// before; a retry that only the transient floor allows makes att when the
// call has none.
func (l *Loop) retry(ctx context.Context, att *callCtx, cfg *Config, fn func(context.Context, Config) error, err error, n *int, b *begun) (_ error, exhausted bool) {
	var needs *Needs // what the request needs of a route (WithNeeds), when a ladder declares limits
	if l.limited.Load() {
		needs = needsOf(ctx)
	}
	for {
		status, hint, why := att.take()
		f := l.describe(err, status, b)
		class, text := f.Class, f.Text
		if b != nil && class == failure.ClassTimeout && status == 0 && f.Status == 0 {
			b.silent = true // a timeout without a response: fn's own deadline, an HTTP client's
		}
		if b != nil && class == failure.ClassStreamStalled {
			b.idled = true // a stream its client's own deadline cut (see stream.End)
		}
		limit := l.retryRules.attempts(cfg, class)
		// A request too long for this route's model goes to the next
		// route of the ladder whatever MaxAttempts says, as a router's
		// fallback does (fallBack); on the same model, only as the
		// attempts allow, when RetryPolicy.Permanent lets it be retried.
		tooLong := class == failure.ClassContextLength
		if *n >= limit && !tooLong {
			break
		}
		acfg, moved := l.nextRoute(b, att, cfg, err, &f, *n+1 >= limit, needs)
		if !moved && (*n >= limit || !l.retryRules.retries(class)) {
			return err, false
		}
		if att == nil { // a retry the transient floor adds: its hints from now on
			att = &callCtx{Context: ctx}
			if b != nil {
				b.att = att
			}
		} else if att.budget != nil && !att.budget.take(att, *n+1) {
			return err, true
		}
		var wait time.Duration
		reason := failure.WaitNone
		if acfg == cfg { // another route's attempt goes at once: the waits are this route's
			wait, reason = l.wait(cfg, *n, err, hint, why, sdkRetried(class))
		}
		if dl, ok := ctx.Deadline(); ok && wait > 0 && time.Until(dl) < wait {
			// The wait would pass the caller's deadline: this route's
			// attempts are over; the next route goes at once, if any.
			if acfg, moved = l.nextRoute(b, att, cfg, err, &f, true, needs); !moved {
				att.unbudget()
				return err, false
			}
			wait, reason = 0, failure.WaitNone
		}
		if wait > 0 {
			if l.sleep(ctx, wait) != nil {
				att.unbudget()
				break
			}
		}
		*n++
		if b != nil {
			b.stalled, b.idled = false, false // the attempt before's (runWatched sets them for its own)
		}
		att.next()
		actx := context.WithValue(att, attemptKey{}, &Attempt{Number: *n, LastErr: err, LastClass: class,
			Memories:   l.mem.similar(text, attemptMemories, l.clock.Now().UnixNano()),
			LastStatus: cmp.Or(status, f.Status), Waited: wait, WaitReason: reason})
		if err = l.runOnce(actx, acfg, fn, b); err == nil || ctx.Err() != nil {
			return err, false
		}
		cfg = acfg // the attempts left run on the route that failed last, or further down
	}
	return err, false
}

// nextRoute returns the config the next attempt of call b runs under
// after the failure err of its last attempt (f described), under cfg: on
// the next route of its ladder, when fallBack says so (moved), noting the
// fall in b; cfg itself otherwise. A failure passed on from a call nested
// in the attempt is the nested agent's: it says nothing of this call's
// route, and moves it nowhere (it is retried, or not, by its class).
func (l *Loop) nextRoute(b *begun, att *callCtx, cfg *Config, err error, f *failure.Failure, last bool, needs *Needs) (*Config, bool) {
	if !l.ownFailure(b, att, err) {
		return cfg, false
	}
	alt, ok := l.fallBack(b, cfg, f.Class, last, needs)
	if !ok {
		return cfg, false
	}
	c := *cfg
	c.Route = alt
	if !b.fellBack { // the call's own route's failure
		b.fellClass, b.fellFrom, b.fellText, b.fellCluster = f.Class, b.route, f.Text, f.Cluster
		b.fellSilent = b.silent || b.stalled || b.idled
	}
	b.fellBack, b.fellRoute, b.route = true, alt, alt
	return &c, true
}

// ownFailure reports whether err, the failure of an attempt of the call
// b, is its route's own: not one a call nested in the attempt returned
// (see Loop.cause, which says the same of the call's last failure).
func (l *Loop) ownFailure(b *begun, att *callCtx, err error) bool {
	switch {
	case b == nil:
		return true
	case att != nil:
		return att.from(err) == ""
	default:
		return !l.lately.seen(b.id, err, b.seq)
	}
}

// wait returns how long to wait after the given failed attempt, before
// a retry on the same route, and why: the longer of the backoff and the
// wait the failure asks for (the transport's header, else err's; see
// RetryPolicy), the latter capped by the policy's MaxWait. The backoff
// is the config's Backoff doubled; after a transient failure (as the
// LLM SDKs retry) it is, when the config sets no Backoff, whoever set
// MaxAttempts, the SDKs' own: the failure's wait when it asks for one,
// else transientBackoff doubled, up to transientMaxBackoff. A retry that only the transient floor
// allows waits at least transientBackoff doubled.
func (l *Loop) wait(cfg *Config, attempt int, err error, hint time.Duration, why string, transient bool) (time.Duration, string) {
	base, sdk := cfg.Backoff, false
	switch {
	case !transient:
	case attempt >= cfg.attempts():
		base = max(base, transientBackoff) // a retry of the transient floor
	case base == 0:
		base, sdk = transientBackoff, true
	}
	limit := time.Duration(maxBackoff)
	if sdk {
		limit = transientMaxBackoff
	}
	d, reason := l.backoff(base, attempt, limit), failure.WaitBackoff
	if d == 0 {
		reason = failure.WaitNone
	}
	if !l.retryRules.serverWait {
		return d, reason
	}
	if hint > 0 {
		why = failure.WaitHeader + " " + why
	} else {
		hint, why = failure.ErrorWait(err)
	}
	if hint = min(roundUpWait(hint), l.retryRules.maxWait); hint > 0 && (hint >= d || sdk) {
		return hint, why
	}
	return d, reason
}

// attemptMemories is how many memories an Attempt carries.
const attemptMemories = 3

// runOnce runs fn once, under cfg's per-attempt deadline, and its
// first-token deadline when it has one (see runWatched, which notes the
// attempt in b).
func (l *Loop) runOnce(ctx context.Context, cfg *Config, fn func(context.Context, Config) error, b *begun) error {
	if cfg.FirstTokenTimeout > 0 {
		return l.runWatched(ctx, cfg, fn, b)
	}
	if cfg.Timeout > 0 {
		actx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		err := fn(actx, *cfg)
		noteSilent(b, err, ctx, actx)
		return err
	}
	if b != nil {
		b.silent = false
	}
	return fn(ctx, *cfg)
}

// noteSilent notes in b whether the attempt that ran under actx, within
// the call's ctx, failed (err) because its own deadline passed
// (Config.Timeout) while the call lived: it got no answer in time, and
// its route is not asked again in the same call (see fallBack; a
// timeout of fn's own, such as its HTTP client's, is found by retry).
func noteSilent(b *begun, err error, ctx, actx context.Context) {
	if b != nil {
		b.silent = err != nil && ctx.Err() == nil && actx.Err() == context.DeadlineExceeded
	}
}

// sleeper is the optional method of a Clock that waits (see Clock).
type sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// sleep waits d on the clock, or until ctx ends.
func (l *Loop) sleep(ctx context.Context, d time.Duration) error {
	if s, ok := l.clock.(sleeper); ok {
		return s.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff returns the wait after the given attempt: uniform in [d/2, d]
// with d = base×2^(attempt-1), capped at limit. The draw is random, or
// the next of a fixed sequence under RetryPolicy.JitterSeed.
func (l *Loop) backoff(base time.Duration, attempt int, limit time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	if l.jitterSeed != 0 {
		return half + time.Duration(splitmix(l.jitterSeed+l.jitterN.Add(1)*0x9e3779b97f4a7c15)%uint64(d-half+1))
	}
	return half + rand.N(d-half+1)
}

// splitmix is the SplitMix64 finaliser.
func splitmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// describe is Memo.Describe for the failure of an attempt, or a call,
// whose last attempt is noted in b: one that stalled before its first
// token is of class ClassFirstTokenTimeout, whatever error fn returned
// for it (fn may return its context's error, which does not say why).
func (l *Loop) describe(err error, status int, b *begun) failure.Failure {
	f := l.memo.Describe(err, status)
	switch {
	case b == nil:
	case b.stalled:
		f.Class = failure.ClassFirstTokenTimeout
	case b.idled:
		f.Class = failure.ClassStreamStalled
	}
	return f
}

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
	watchIdled                 // the stream went silent past the idle limit: cancelled
	watchEnded                 // the attempt returned
)

// watch is an attempt's context while the loop waits for its first token,
// and then, with a stream idle limit (idle), for each next chunk.
type watch struct {
	context.Context
	cancel context.CancelCauseFunc
	l      *Loop
	start  reading
	idle   time.Duration // the stream idle limit (0: none)
	state  atomic.Uint32
	first  atomic.Int64 // the time to first token, ns (at least 1)
	last   atomic.Int64 // when the last chunk came, ns since start
	stop   func() bool  // disarms the first-token deadline
	mu     sync.Mutex   // guards idleStop
	// idleStop disarms the idle timer; nil when none is armed.
	idleStop func() bool
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
	w.last.Store(int64(d))
	if w.state.CompareAndSwap(watchWaiting, watchStarted) {
		w.stop()
		if w.idle > 0 {
			w.arm(w.idle)
		}
	}
}

// Chunk implements firsttoken.Watch: after the first token, it notes
// when the stream's last chunk came, for the idle limit.
func (w *watch) Chunk() {
	if w.idle > 0 && w.state.Load() == watchStarted {
		_, d := w.l.since(w.start)
		w.last.Store(int64(d))
	}
}

// arm arms the idle timer to check the stream after d, unless the
// attempt has ended.
func (w *watch) arm(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state.Load() == watchStarted {
		w.idleStop = w.l.afterFunc(d, w.idleCheck)
	}
}

// idleCheck cuts the attempt when its stream has been silent for the idle
// limit, or checks again when the silence will reach it.
func (w *watch) idleCheck() {
	if w.state.Load() != watchStarted {
		return
	}
	_, now := w.l.since(w.start)
	if gap := now - time.Duration(w.last.Load()); gap < w.idle {
		w.arm(w.idle - gap)
		return
	}
	if w.state.CompareAndSwap(watchStarted, watchIdled) {
		w.cancel(failure.ErrStreamStalled)
	}
}

// end marks the attempt returned, disarms the idle timer, and returns
// the state it ended in.
func (w *watch) end() uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.state.Load()
	for st == watchWaiting || st == watchStarted {
		if w.state.CompareAndSwap(st, watchEnded) {
			break
		}
		st = w.state.Load()
	}
	if w.idleStop != nil {
		w.idleStop()
	}
	return st
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
	outer := ctx
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	if b != nil {
		b.stalled, b.idled = false, false
	}
	tctx := ctx
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &watch{Context: cctx, cancel: cancel, l: l, start: l.now(), idle: l.retryRules.streamIdle}
	w.stop = l.afterFunc(cfg.FirstTokenTimeout, w.stall)
	defer w.stop()
	err := fn(w, *cfg)
	st := w.end()
	if b != nil {
		if w.first.Load() != 0 {
			if v, ok := l.agents.Load(b.id); ok {
				v.(*agent).tel.observeFirstToken(time.Duration(w.first.Load()))
			}
		}
		switch st {
		case watchStalled:
			b.stalled = err != nil
		case watchIdled:
			b.idled = err != nil
		}
		noteSilent(b, err, outer, tctx)
	}
	return err
}

// reading is the time a call started: off, nanoseconds since the clock's
// base, with the default and the coarse clocks; t with another clock.
type reading struct {
	off int64
	t   time.Time
}

// now is the reading a call starts with.
func (l *Loop) now() reading {
	switch {
	case l.realTime:
		return reading{off: l.mono.offset()}
	case l.coarse != nil:
		return reading{off: l.coarse.offset()}
	}
	return reading{t: l.clock.Now()}
}

// since returns the time now (Unix nanoseconds) and the time elapsed since
// start, a reading of l.now. With the default clock it reads the
// monotonic clock only; with the coarse clock, an atomic value.
func (l *Loop) since(start reading) (int64, time.Duration) {
	switch {
	case l.realTime:
		return l.mono.since(start.off)
	case l.coarse != nil:
		off := l.coarse.offset()
		return l.coarse.baseN + off, time.Duration(off - start.off)
	}
	end := l.clock.Now()
	return end.UnixNano(), end.Sub(start.t)
}
