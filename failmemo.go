package selfimprove

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// The failure path scrubs, classifies and signs each failure's error
// text. A service's failures mostly repeat the same few texts, so the
// Loop remembers what it derived from the last texts it saw: a failure
// whose text is one of them costs a hash and a comparison, and allocates
// nothing.

// memoSlots is how many texts the memo holds (direct-mapped by hash).
const memoSlots = 64

// textMemo is what the failure path derives from one raw error text.
type textMemo struct {
	raw     string // the error's text, cut to maxScrubText bytes
	text    string // errText: scrubbed and cut to maxErrText bytes
	sig     string // its signature
	cluster uint64 // clusterID(sig)
	// class is classifyText(text, status) for the last status asked.
	class atomic.Pointer[memoClass]
}

type memoClass struct {
	status int
	class  Class
}

// failureMemo is the Loop's memo of recent error texts.
type failureMemo struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[textMemo]
}

// derive returns the memo of raw (a text from errTextN(err,
// maxScrubText)), computing it on a miss.
func (m *failureMemo) derive(raw string) *textMemo {
	slot := &m.slots[maphash.String(m.seed, raw)%memoSlots]
	if e := slot.Load(); e != nil && e.raw == raw {
		return e
	}
	raw = strings.Clone(raw)
	e := &textMemo{raw: raw, text: keepText(raw)}
	var buf [4 * maxSignature]byte
	sig := appendSignature(buf[:0], e.text)
	e.sig, e.cluster = string(sig), clusterID(sig)
	slot.Store(e)
	return e
}

// classOf is classifyText(e.text, status).
func (e *textMemo) classOf(status int) Class {
	if c := e.class.Load(); c != nil && c.status == status {
		return c.class
	}
	c := &memoClass{status, classifyText(e.text, status)}
	e.class.Store(c)
	return c.class
}
