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
// window and day counter (fastCounts.until; 0 when closed). Anything else
// (a failure, a probe, a call under verification, a call past the bucket)
// takes the agent's lock, which first closes the path and settles what
// the counters hold into the tracker and the agent's metrics (see
// agent.settleLocked), and then reopens it when no change is under
// verification. A reader of the state (Stats, a save, an analysis, the
// fleet's code) settles first too, so it sees every booked call.
//
// The counters are one word per bucket of the latency histogram, so that
// a call books itself, its duration and its histogram bucket with one
// compare-and-swap. A call that checked the path open just before it
// closed may book after the settle: it stays in the counters until the
// next one (it started under the config before any change the lock
// holder makes, whose calls see the path closed). An eviction has no
// next settle: it seals the counters as it settles them (fastSeal), so
// that such a call fails to book, and takes the locked path, which books
// it on the agent loaded again.
//
// An agent starts with one set of counters. When two calls book at the
// same moment (a compare-and-swap fails), the agent turns hot: its calls
// then book in per-processor sets drawn from a sync.Pool, each on cache
// lines of its own, so that one busy agent scales with cores.

// A counter word holds the calls booked since the last settle in its top
// bits and the sum of their durations in nanoseconds in its low
// fastLatBits (2.4 hours). A call that would overflow either takes the
// locked path, which settles.
const (
	fastLatBits  = 43
	fastLatMax   = 1<<fastLatBits - 1
	fastCountMax = 1<<(64-fastLatBits) - 1
	fastOne      = 1 << fastLatBits // one call in the count
	// fastSealed is a sealed counter word (an evicted agent's): its count
	// is full, so that add refuses it, and its durations' sum is one a
	// live word never reaches (add keeps it below fastLatMax).
	fastSealed = ^uint64(0)
)

// fastTake says what collecting a counter word does to it.
type fastTake uint8

const (
	fastPeek  fastTake = iota // reads it
	fastDrain                 // empties it
	fastSeal                  // empties and seals it: no call books in it until unsealed
)

// fastHist is a set of counters: one word per latency bucket.
type fastHist [len(latencyBounds) + 1]atomic.Uint64

// fastShard is one set of counters of a hot agent, on cache lines of its
// own.
type fastShard struct {
	w fastHist
	_ [64 - (8*(len(latencyBounds)+1))%64]byte
}

// add books one call of dur nanoseconds in w's bucket b, unless it would
// overflow; ok false with contended true when another call changed the
// word meanwhile.
func (w *fastHist) add(b int, dur int64) (ok, contended bool) {
	c := &w[b]
	n := c.Load()
	if n>>fastLatBits == fastCountMax || n&fastLatMax+uint64(dur) >= fastLatMax { // sealed: full
		return false, false
	}
	if c.CompareAndSwap(n, n+fastOne+uint64(dur)) {
		return true, false
	}
	return false, true
}

// collect adds what w holds to calls (per bucket) and lat, and empties
// or seals w as take says. A sealed word holds nothing, and stays sealed.
func (w *fastHist) collect(calls *[len(latencyBounds) + 1]uint64, lat *int64, take fastTake) {
	for i := range w {
		n := w[i].Load()
		switch {
		case n == fastSealed:
			continue
		case take == fastSeal:
			n = w[i].Swap(fastSealed)
		case take == fastDrain && n != 0:
			n = w[i].Swap(0)
		}
		calls[i] += n >> fastLatBits
		*lat += int64(n & fastLatMax)
	}
}

// unseal opens w's sealed words again, empty.
func (w *fastHist) unseal() {
	for i := range w {
		w[i].CompareAndSwap(fastSealed, 0)
	}
}

// fastCounts is an agent's lock-free success path. The agent's own set of
// counters lives with its metrics (telemetry.live).
type fastCounts struct {
	until atomic.Int64 // calls ending before this time (Unix ns) may book; 0: closed
	hot   atomic.Pointer[hotShards]
}

// hotShards are the per-processor counters of a hot agent.
type hotShards struct {
	pool sync.Pool
	mu   sync.Mutex   // guards list
	list []*fastShard // every set the pool made, at most maxHotShards
	next int          // round-robin over list once it is full
	// sealed: the sets are sealed (fastSeal), and a new one is made so.
	sealed bool
}

// maxHotShards bounds the counter sets of one hot agent.
var maxHotShards = max(4, 2*runtime.GOMAXPROCS(0))

// book counts one successful call that ended at end (Unix ns) after dur,
// in own (the agent's counters) or a hot agent's per-processor ones, and
// reports whether it could; when it could not, the caller takes the
// locked path.
func (f *fastCounts) book(end, dur int64, own *fastHist) bool {
	if end >= f.until.Load() || uint64(dur) > fastLatMax {
		return false
	}
	b := latencyBucket(time.Duration(dur))
	if h := f.hot.Load(); h != nil {
		sh := h.pool.Get().(*fastShard)
		ok, contended := sh.w.add(b, dur)
		for contended { // another processor shares this set
			ok, contended = sh.w.add(b, dur)
		}
		h.pool.Put(sh)
		return ok
	}
	ok, contended := own.add(b, dur)
	if contended {
		// Another call booked at the same moment: spread from now on.
		f.heat()
		return f.book(end, dur, own)
	}
	return ok
}

// heat turns f hot, once.
func (f *fastCounts) heat() {
	if f.hot.Load() != nil {
		return
	}
	h := &hotShards{}
	h.pool.New = func() any { return h.make() }
	f.hot.CompareAndSwap(nil, h)
}

// make returns a new set for the pool, or an existing one once the agent
// has maxHotShards (the pool drops idle sets at garbage collections;
// their counts stay in list).
func (h *hotShards) make() *fastShard {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.list) >= maxHotShards {
		sh := h.list[h.next%len(h.list)]
		h.next++
		return sh
	}
	sh := new(fastShard)
	if h.sealed {
		for i := range sh.w {
			sh.w[i].Store(fastSealed)
		}
	}
	h.list = append(h.list, sh)
	return sh
}

// collect adds what own and the hot sets hold to calls (per bucket) and
// lat, and empties or seals them as take says. Sealing makes a cold
// agent hot, with no set yet, so that a call that finds own sealed does
// not make it hot with sets unsealed.
func (f *fastCounts) collect(own *fastHist, calls *[len(latencyBounds) + 1]uint64, lat *int64, take fastTake) {
	own.collect(calls, lat, take)
	h := f.hot.Load()
	if h == nil && take == fastSeal {
		f.heat()
		h = f.hot.Load()
	}
	if h != nil {
		h.mu.Lock()
		if take == fastSeal {
			h.sealed = true
		}
		for _, sh := range h.list {
			sh.w.collect(calls, lat, take)
		}
		h.mu.Unlock()
	}
}

// unseal opens own and the hot sets again, empty (an eviction whose save
// failed).
func (f *fastCounts) unseal(own *fastHist) {
	own.unseal()
	if h := f.hot.Load(); h != nil {
		h.mu.Lock()
		h.sealed = false
		for _, sh := range h.list {
			sh.w.unseal()
		}
		h.mu.Unlock()
	}
}

// latencyBounds are the upper bounds of the latency histogram's buckets
// (see LatencyBuckets); a last bucket counts the calls above them.
var latencyBounds = [...]time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

// latencyBucket is the index of d's bucket in a latency histogram.
func latencyBucket(d time.Duration) int {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	return i
}
