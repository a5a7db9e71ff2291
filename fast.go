package selfimprove

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The success path without the lock.
//
// A successful call books itself in one of its agent's fast counters,
// with no lock, while the fast path is open: when no change is under
// verification, and until the end of the current bucket of the agent's
// window and day counter. Anything else (a failure, a probe, a call under
// verification, a call past the bucket) takes the agent's lock, which
// first closes the counters and settles what they hold into the tracker
// (see agent.settleLocked), and then reopens them when no change is under
// verification. A reader of the state (Stats, a save, an analysis, the
// fleet's code) settles first too, so it sees every booked call.
//
// An agent starts with one counter. When two calls book at the same
// moment (a compare-and-swap fails), the agent turns hot: its calls then
// book in per-processor counters drawn from a sync.Pool, which keeps each
// processor on its own cache line, so that one busy agent scales with
// cores.

// A counter is one word, so that a call books with one compare-and-swap:
// the top bit marks it open, the next fastCountBits count the calls booked
// since the last settle, and the low fastLatBits sum their durations in
// nanoseconds (2.4 hours). A call that would overflow either takes the
// locked path, which settles.
const (
	fastOpen      = 1 << 63
	fastLatBits   = 43
	fastCountBits = 20
	fastLatMax    = 1<<fastLatBits - 1
	fastCountMax  = 1<<fastCountBits - 1
	fastOne       = 1 << fastLatBits // one call in the count
)

// fastShard is one counter of a hot agent, with the histogram of the
// calls it booked, on cache lines of its own.
type fastShard struct {
	n    fastWord
	hist latencyHist
	_    [64 - (8+8*(len(latencyBounds)+1))%64]byte
}

// fastWord is a counter's word.
type fastWord struct{ atomic.Uint64 }

// add books one call of dur nanoseconds unless the counter is closed or
// would overflow.
func (w *fastWord) add(dur int64) bool {
	if uint64(dur) > fastLatMax {
		return false
	}
	for {
		n := w.Load()
		if n&fastOpen == 0 || (n>>fastLatBits)&fastCountMax == fastCountMax || n&fastLatMax+uint64(dur) > fastLatMax {
			return false
		}
		if w.CompareAndSwap(n, n+fastOne+uint64(dur)) {
			return true
		}
	}
}

// take closes the counter and returns what it held.
func (w *fastWord) take() (calls uint64, lat int64) {
	n := w.Swap(0)
	return (n >> fastLatBits) & fastCountMax, int64(n & fastLatMax)
}

// fastCounts is an agent's lock-free success path. Its own counter is not
// padded: an agent booked into by several processors at once turns hot.
type fastCounts struct {
	until atomic.Int64 // calls ending before this time (Unix ns) may book here
	base  fastWord
	hot   atomic.Pointer[hotShards]
}

// hotShards are the per-processor counters of a hot agent.
type hotShards struct {
	pool sync.Pool
	mu   sync.Mutex   // guards list and open
	list []*fastShard // every counter the pool made, at most maxHotShards
	open bool         // the state new counters start in
	next int          // round-robin over list once it is full
}

// maxHotShards bounds the counters of one hot agent.
var maxHotShards = max(4, 2*runtime.GOMAXPROCS(0))

// book counts one successful call that ended at end (Unix ns) after dur,
// in the counters and in a latency histogram (hist, or a hot agent's
// counter's own), and reports whether it could; when it could not, the
// caller takes the locked path.
func (f *fastCounts) book(end, dur int64, hist *latencyHist) bool {
	if end >= f.until.Load() {
		return false
	}
	if h := f.hot.Load(); h != nil {
		sh := h.get()
		ok := sh.n.add(dur)
		if ok {
			sh.hist.observe(time.Duration(dur))
		}
		h.pool.Put(sh)
		return ok
	}
	if uint64(dur) > fastLatMax {
		return false
	}
	n := f.base.Load()
	if n&fastOpen == 0 || (n>>fastLatBits)&fastCountMax == fastCountMax || n&fastLatMax+uint64(dur) > fastLatMax {
		return false
	}
	if f.base.CompareAndSwap(n, n+fastOne+uint64(dur)) {
		hist.observe(time.Duration(dur))
		return true
	}
	// Another call booked at the same moment: spread from now on.
	f.heat()
	return f.book(end, dur, hist)
}

// heat turns f hot, once.
func (f *fastCounts) heat() {
	if f.hot.Load() != nil {
		return
	}
	h := &hotShards{open: f.base.Load()&fastOpen != 0}
	h.pool.New = func() any { return h.make() }
	f.hot.CompareAndSwap(nil, h)
}

// get returns a counter for the calling processor.
func (h *hotShards) get() *fastShard {
	return h.pool.Get().(*fastShard)
}

// make returns a new counter for the pool, or an existing one once the
// agent has maxHotShards (the pool drops idle counters at garbage
// collections; their counts stay in list).
func (h *hotShards) make() *fastShard {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.list) >= maxHotShards {
		sh := h.list[h.next%len(h.list)]
		h.next++
		return sh
	}
	sh := new(fastShard)
	if h.open {
		sh.n.Store(fastOpen)
	}
	h.list = append(h.list, sh)
	return sh
}

// close closes every counter and returns what they held.
func (f *fastCounts) close() (calls uint64, lat int64) {
	f.until.Store(0)
	calls, lat = f.base.take()
	if h := f.hot.Load(); h != nil {
		h.mu.Lock()
		h.open = false
		for _, sh := range h.list {
			c, l := sh.n.take()
			calls, lat = calls+c, lat+l
		}
		h.mu.Unlock()
	}
	return calls, lat
}

// peek returns what the counters hold, leaving them as they are.
func (f *fastCounts) peek() (calls uint64, lat int64) {
	add := func(n uint64) {
		calls += (n >> fastLatBits) & fastCountMax
		lat += int64(n & fastLatMax)
	}
	add(f.base.Load())
	if h := f.hot.Load(); h != nil {
		h.mu.Lock()
		for _, sh := range h.list {
			add(sh.n.Load())
		}
		h.mu.Unlock()
	}
	return calls, lat
}

// open lets calls ending before until book here.
func (f *fastCounts) open(until int64) {
	f.base.Store(fastOpen)
	if h := f.hot.Load(); h != nil {
		h.mu.Lock()
		h.open = true
		for _, sh := range h.list {
			sh.n.Store(fastOpen)
		}
		h.mu.Unlock()
	}
	f.until.Store(until)
}

// settleLocked closes a's fast path and books the calls it held into the
// tracker, as successes that ended just before now (Unix ns) and before
// the bucket they were booked in ended. a.mu is held.
func (a *agent) settleLocked(now int64) {
	until := a.fast.until.Load()
	a.tel.seq.Add(1)
	calls, lat := a.fast.close()
	a.tel.fastCalls.Add(int64(calls))
	a.tel.fastSum.Add(lat)
	a.tel.seq.Add(1)
	if calls == 0 {
		return
	}
	if until == 0 || now < until {
		until = now
	}
	a.s.Tracker.addSuccesses(until-1, calls, lat)
	a.dirty = true
	if a.fl != nil {
		a.fl.tally.successes(a.s.Gen, int64(calls), lat)
	}
}

// settleFleetLocked settles a (not once it is evicted) before the fleet's
// code reads or changes its state. a.mu is held.
func (a *agent) settleFleetLocked(l *Loop) {
	if !a.evicted {
		a.settleLocked(l.clock.Now().UnixNano())
	}
}

// reopenLocked opens a's fast path again when no change is under
// verification, up to the end of the tracker's current buckets. a.mu is
// held and a is settled.
func (a *agent) reopenLocked() {
	if a.s.Verifying != nil || a.evicted {
		return
	}
	a.fast.open(a.s.Tracker.bucketEnd())
}
