package replica

import (
	"sync"
	"sync/atomic"
	"time"
)

// Link is what a replica knows of its connection to the fleet that
// belongs to no agent: the fleet timeout, whether it is backing off, and
// the outage under way. The zero value, with Timeout set, is up; safe
// for concurrent use.
type Link struct {
	// Timeout is the fleet time of one chain of operations (Chain).
	Timeout time.Duration

	down atomic.Bool
	// The outage under way, guarded by mu: when it began and when the
	// fleet answered again (Unix ns; 0: none, or down). outages says one
	// is under way, read without mu.
	mu           sync.Mutex
	outage, upAt int64
	outages      atomic.Bool
}

// Down reports whether the replica is backing off since the fleet's last
// failure: nothing is sent to the fleet but the flusher's attempts to
// find it again.
func (k *Link) Down() bool { return k.down.Load() }

// Failed notes that the fleet could not be reached at now (Unix ns): the
// replica backs off until the fleet answers again. began reports the
// first failure of an outage: the fleet had answered for the settle time
// of Answered since the last outage (one log line and one event an
// outage).
func (k *Link) Failed(now int64) (began bool) {
	if !k.down.CompareAndSwap(false, true) {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.upAt = 0
	if k.outage != 0 {
		return false // the fleet had not answered for the settle time since the last failure
	}
	k.outage = now
	k.outages.Store(true)
	return true
}

// Answered notes that the fleet answered at now (Unix ns). back reports
// that the replica was backing off: every live agent is to be compared
// with the fleet's state. over reports that the outage under way is
// over, the fleet having answered for settle since it came back (a
// failure within it belongs to the same outage); d is then how long the
// outage lasted.
func (k *Link) Answered(now int64, settle time.Duration) (back, over bool, d time.Duration) {
	if k.down.CompareAndSwap(true, false) {
		k.mu.Lock()
		k.upAt = now
		k.mu.Unlock()
		return true, false, 0
	}
	if !k.outages.Load() {
		return false, false, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	began, up := k.outage, k.upAt
	if began == 0 || up == 0 || k.down.Load() || now-up < int64(settle) {
		return false, false, 0
	}
	k.outage, k.upAt = 0, 0
	k.outages.Store(false)
	return false, true, time.Duration(up - began)
}
