package replica

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSaveLock: the one-word save lock excludes (100 goroutines add to a
// counter it guards), wakes every waiter at Unlock, and lockWithin gives
// up after its time while the lock is held.
func TestSaveLock(t *testing.T) {
	var l SaveLock
	n := 0
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 100 {
				l.Lock()
				n++
				l.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 10000 || l.p.Load() != nil {
		t.Fatalf("counter %d, lock %v: want 10000, unlocked", n, l.p.Load())
	}
	synctest.Test(t, func(t *testing.T) {
		l.Lock()
		start := time.Now()
		if l.LockWithin(50 * time.Millisecond) {
			t.Fatal("lockWithin took a held lock")
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("lockWithin gave up after %v, want 50ms", d)
		}
		got := make(chan bool, 2)
		for range 2 {
			go func() { got <- l.LockWithin(time.Second) }()
		}
		synctest.Wait() // both wait on the holder
		l.Unlock()
		if !<-got {
			t.Fatal("a waiter did not get the lock at Unlock")
		}
		l.Unlock()
		if !<-got {
			t.Fatal("the second waiter did not get the lock")
		}
		l.Unlock()
	})
}
