package selfimprove

import (
	"slices"
	"sync"
	"time"
)

// Bounds on the recent events kept in memory (WithRecentEvents) and on a
// subscription's buffer.
const (
	defaultRecentEvents = 1000
	maxRecentEvents     = 1 << 20
	defaultSubscribeBuf = 64
	maxSubscribeBuf     = 1 << 16
)

// hub keeps the latest events in a ring and hands each new one to the
// subscriptions. Publishing never blocks: a subscription whose buffer is
// full is ended with ErrSubscriberBehind.
type hub struct {
	mu     sync.Mutex
	ring   []Event // circular, capacity cap(ring); oldest at head once full
	head   int
	subs   map[*Subscription]struct{}
	closed bool
}

func newHub(n int) *hub {
	return &hub{ring: make([]Event, 0, n), subs: map[*Subscription]struct{}{}}
}

// publish adds ev to the ring and to every subscription. Digests are not
// published: their events were.
func (h *hub) publish(ev *Event) {
	if ev.Type == EventDigest {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if len(h.ring) < cap(h.ring) {
		h.ring = append(h.ring, *ev)
	} else {
		h.ring[h.head] = *ev
		h.head = (h.head + 1) % len(h.ring)
	}
	for s := range h.subs {
		select {
		case s.ch <- *ev:
		default:
			h.endLocked(s, ErrSubscriberBehind)
		}
	}
}

// recentLocked returns the events in the ring, oldest first.
func (h *hub) recentLocked() []Event {
	out := make([]Event, 0, len(h.ring))
	out = append(out, h.ring[h.head:]...)
	return append(out, h.ring[:h.head]...)
}

// endLocked ends s with err.
func (h *hub) endLocked(s *Subscription, err error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	s.err = err
	close(s.ch)
}

// close ends every subscription with ErrClosed; nothing is published
// after.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.endLocked(s, ErrClosed)
	}
}

// Subscription delivers the events the loop records, as they are
// recorded (see Subscribe). A Subscription is ended by Close, by the
// Loop's Close (Err returns ErrClosed), or when its reader falls behind
// (Err returns ErrSubscriberBehind); C is then closed.
type Subscription struct {
	// Backlog holds the recent events after the one Subscribe was given,
	// oldest first; C carries those that come after them.
	Backlog []Event
	// C carries each event once, in the order the loop recorded them.
	// The events' Change and Proposal are shared with other readers: do
	// not modify them.
	C <-chan Event

	ch  chan Event
	h   *hub
	err error // guarded by h.mu
}

// Close ends the subscription and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.h.endLocked(s, nil)
}

// Err returns why the subscription ended: ErrSubscriberBehind,
// ErrClosed, or nil (open, or ended by Close).
func (s *Subscription) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

// eventsAfter returns the events of evs (oldest first) after the one
// with ID id, or, when none has it, those whose IDs sort after it.
func eventsAfter(evs []Event, id string) []Event {
	if i := slices.IndexFunc(evs, func(e Event) bool { return e.ID == id }); i >= 0 {
		return evs[i+1:]
	}
	return slices.DeleteFunc(evs, func(e Event) bool { return e.ID <= id })
}

// EventFilter selects events for Loop.Events. Its zero value selects the
// latest 100 recent events.
type EventFilter struct {
	// AgentIDs keeps the events of these agents; nil keeps all.
	AgentIDs []string
	// Types keeps the events of these types; nil keeps all.
	Types []EventType
	// Since and Until keep the events at or after Since and before Until;
	// zero: no bound.
	Since, Until time.Time
	// After keeps the events recorded after the one with this ID; Before,
	// those recorded before it (see Subscribe for an ID no longer among
	// the recent events). Use them to page.
	After, Before string
	// Limit bounds the events returned: the first Limit after After, or
	// else the last Limit. Default 100 when 0 or less.
	Limit int
}

// Keeps reports whether f selects e by its agent, type and time (After,
// Before and Limit are not looked at).
func (f *EventFilter) Keeps(e *Event) bool {
	switch {
	case f.AgentIDs != nil && !slices.Contains(f.AgentIDs, e.AgentID),
		f.Types != nil && !slices.Contains(f.Types, e.Type),
		!f.Since.IsZero() && e.Time.Before(f.Since),
		!f.Until.IsZero() && !e.Time.Before(f.Until):
		return false
	}
	return true
}
