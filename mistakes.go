package selfimprove

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"
)

// A caller's mistakes that a call survives (an invalid agent ID, a call
// after Close) run fn untracked and come back in Report.LoopErr, which a
// caller may never read. So they are logged too, through the Loop's
// logger, at level Warn: at most once a minute per mistake, and in a
// table of fixed size, so that a flood of distinct bad IDs neither grows
// memory nor floods the log.

const (
	// mistakeEvery is how often one mistake is logged at most.
	mistakeEvery = time.Minute
	// mistakeSlots is how many mistakes are remembered: at most so many
	// lines are logged in any minute. A mistake that finds no slot free
	// is counted, and the next line says how many were not logged.
	mistakeSlots = 64
)

// mistakeLog rate-limits the log lines of mistakes. A mistake is keyed by
// its kind of error and, for an invalid ID, the first maxQuoted bytes of
// the ID and its length (all the line shows of it): the line of a call
// after Close stands for all of them, whatever their IDs.
type mistakeLog struct {
	mu       sync.Mutex
	slots    [mistakeSlots]mistakeSlot
	unlogged int64 // mistakes that found no free slot, since the last line
}

type mistakeSlot struct {
	key      uint64    // 0: free
	at       time.Time // the last line
	repeated int64     // the mistake's occurrences since, not logged
}

// note records a mistake (why, of the call of agentID) at now, and
// reports whether to log it: with the times it happened since its last
// line, and the mistakes that could not be logged at all.
func (m *mistakeLog) note(seed maphash.Seed, agentID string, why error, now time.Time) (log bool, repeated, unlogged int64) {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(why.Error())
	if !errors.Is(why, ErrClosed) {
		h.WriteString(agentID[:min(len(agentID), maxQuoted)])
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(agentID)))
		h.Write(n[:])
	}
	key := h.Sum64() | 1
	m.mu.Lock()
	defer m.mu.Unlock()
	var free *mistakeSlot
	for i := range m.slots {
		s := &m.slots[i]
		stale := s.key == 0 || now.Sub(s.at) >= mistakeEvery || now.Before(s.at)
		switch {
		case s.key == key && !stale:
			s.repeated++
			return false, 0, 0
		case s.key == key:
			repeated, s.repeated, s.at = s.repeated, 0, now
			unlogged, m.unlogged = m.unlogged, 0
			return true, repeated, unlogged
		case stale && free == nil:
			free = s
		}
	}
	if free == nil {
		m.unlogged++
		return false, 0, 0
	}
	// A stale slot's repeats were never logged: the next line counts them.
	m.unlogged += free.repeated
	*free = mistakeSlot{key: key, at: now}
	unlogged, m.unlogged = m.unlogged, 0
	return true, 0, unlogged
}

// mistakeText says what the caller did.
func mistakeText(why error) string {
	switch {
	case errors.Is(why, ErrClosed):
		return "the loop is closed"
	case errors.Is(why, ErrStoreSlow):
		return "the store did not load the agent in time"
	}
	return "invalid agent ID"
}

// log logs, to lg, a call of agentID that ran untracked because of why
// (at now; seed keys the mistakes), unless the same mistake was logged
// within the minute. The ID is shown quoted, its first maxQuoted bytes at
// most.
func (m *mistakeLog) log(lg *slog.Logger, seed maphash.Seed, agentID string, why error, now time.Time) {
	ok, repeated, unlogged := m.note(seed, agentID, why, now)
	if !ok {
		return
	}
	attrs := []any{"agent", quoteCut(agentID, maxQuoted), "agent_bytes", len(agentID), "error", why}
	if repeated > 0 {
		attrs = append(attrs, "repeated", repeated)
	}
	if unlogged > 0 {
		attrs = append(attrs, "unlogged", unlogged)
	}
	lg.Warn("selfimprove: a call ran untracked: "+mistakeText(why), attrs...)
}
