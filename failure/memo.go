package failure

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// A Failure is what the loop derives from a failed call's error: its
// class, the HTTP status its chain reports, its scrubbed text, and the
// signature and cluster that group it with failures like it.
type Failure struct {
	// Class is the failure's class (see Classify).
	Class Class
	// Status is the HTTP status the error's chain reports (StatusCode()
	// or HTTPStatusCode()), else the one given to Describe; 0 for none.
	Status int
	// Text is the error's text, scrubbed and cut to MaxText bytes.
	Text string
	// Signature is Text's signature (see Signature).
	Signature string
	// Cluster is the signature's cluster (ClusterOf; FormatClusterID
	// gives the form ClusterID returns).
	Cluster uint64
}

// A Memo describes failures, remembering what it derived from the last
// error texts it saw: a service's failures mostly repeat the same few
// texts, and a failure whose text is one of them costs a hash and a
// comparison, and allocates nothing. It is safe for concurrent use. The
// zero Memo is not usable: make one with NewMemo.
//
// Describe is the one path by which the loop classifies a failure: the
// first attempt, each retry and a panic in the wrapped function all go
// through it.
type Memo struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[memoEntry]
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo { return &Memo{seed: maphash.MakeSeed()} }

// memoSlots is how many texts a Memo holds (direct-mapped by hash).
const memoSlots = 64

// memoEntry is what a Memo derived from one raw error text.
type memoEntry struct {
	raw     string // the error's text, cut to maxScrubText+utf8.UTFMax bytes
	text    string // Text: scrubbed and cut to MaxText bytes
	sig     string // its signature
	cluster uint64 // ClusterOf(sig)
	// class is classifyText(text, status) for the last status asked.
	class atomic.Pointer[memoClass]
}

type memoClass struct {
	status int
	class  Class
}

// Describe returns what err is. status is an HTTP status seen outside
// err (by selfimprove.Transport), 0 for none; the status err's chain
// reports takes precedence. A panic in one of err's methods is caught:
// the text is then a note saying so, and the class ClassOther.
func (m *Memo) Describe(err error, status int) Failure {
	if err == nil {
		return Failure{Class: ClassOther}
	}
	e := m.derive(textN(err, maxScrubText+utf8.UTFMax))
	class, st := classifyErr(err, e.text)
	if st == 0 {
		st = status
	}
	if class == "" {
		class = e.classOf(st)
	}
	return Failure{Class: class, Status: st, Text: e.text, Signature: e.sig, Cluster: e.cluster}
}

// derive returns the entry of raw (a text from textN(err,
// maxScrubText+utf8.UTFMax)), computing it on a miss: more than
// maxScrubText bytes when the text was cut (a rune is at most UTFMax).
func (m *Memo) derive(raw string) *memoEntry {
	slot := &m.slots[maphash.String(m.seed, raw)%memoSlots]
	if e := slot.Load(); e != nil && e.raw == raw {
		return e
	}
	raw = strings.Clone(raw)
	e := &memoEntry{raw: raw, text: keepText(raw)}
	var buf [4 * MaxSignature]byte
	sig := AppendSignature(buf[:0], e.text)
	e.sig, e.cluster = string(sig), ClusterOf(sig)
	slot.Store(e)
	return e
}

// classOf is classifyText(e.text, status).
func (e *memoEntry) classOf(status int) Class {
	if c := e.class.Load(); c != nil && c.status == status {
		return c.class
	}
	c := &memoClass{status, classifyText(e.text, status)}
	e.class.Store(c)
	return c.class
}

// Panic returns the error that stands for a panic with value v in a
// wrapped function: its class is ClassPanic and its text "panic: " and
// v. The loop reports it as the call's error and re-raises the panic.
func Panic(v any) error { return &panicError{v} }

type panicError struct{ v any }

func (e *panicError) Error() string { return "panic: " + fmt.Sprint(e.v) }

// FailureClass returns ClassPanic.
func (e *panicError) FailureClass() Class { return ClassPanic }
