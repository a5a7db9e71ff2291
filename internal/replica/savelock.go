package replica

import (
	"sync/atomic"
	"time"
)

// SaveLock is a mutex whose waiters wait on a channel (a wait the
// scheduler, and testing/synctest, see as blocked on the holder); the
// zero value is unlocked. It serialises an agent's saves, and so its
// commits: a holder with a fleet holds it for one chain of waits on the
// fleet at most (Chain). It is one word, so that an agent stays in its
// size class: nil when unlocked, lockedAlone when held with no waiter,
// else the channel the waiters wait on, closed at the next Unlock (the
// only allocation, and only under contention).
type SaveLock struct {
	p atomic.Pointer[chan struct{}]
}

// lockedAlone marks a SaveLock held with no waiter; it is never closed.
var lockedAlone = make(chan struct{})

// Lock takes the lock.
func (s *SaveLock) Lock() { s.LockWithin(-1) }

// LockWithin takes the lock if it can within d (d < 0: however long it
// takes), and reports whether it did.
func (s *SaveLock) LockWithin(d time.Duration) bool {
	var expired <-chan time.Time
	for {
		if s.p.CompareAndSwap(nil, &lockedAlone) {
			return true
		}
		cur := s.p.Load()
		if cur == nil {
			continue
		}
		if cur == &lockedAlone {
			free := make(chan struct{})
			if !s.p.CompareAndSwap(cur, &free) {
				continue
			}
			cur = &free
		}
		if d >= 0 && expired == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-*cur:
		case <-expired:
			return false
		}
	}
}

// Unlock releases the lock, and wakes its waiters.
func (s *SaveLock) Unlock() {
	if c := s.p.Swap(nil); c != nil && c != &lockedAlone {
		close(*c)
	}
}
