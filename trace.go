package selfimprove

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Outcome is how a call ended, for the loop's accounting.
type Outcome string

// The outcomes.
const (
	OutcomeSuccess Outcome = "success"
	OutcomeFailure Outcome = "failure"
	OutcomeIgnored Outcome = "ignored" // the caller's own context ended
)

// Trace is one call, as written to the trace log.
type Trace struct {
	// Time is when the call ended, in UTC.
	Time     time.Time     `json:"time"`
	AgentID  string        `json:"agent_id"`
	Version  int           `json:"version"`
	Outcome  Outcome       `json:"outcome"`
	Duration time.Duration `json:"duration_ns"`
	Attempts int           `json:"attempts"`
	// Err is the error text (cut to 200 bytes) of a failed or ignored call.
	Err string `json:"error,omitempty"`
}

// TraceMode says whether and how durably the loop logs each call.
type TraceMode int

// The trace modes. What a crash (kill -9, power loss after the fsync
// returns) can lose in each:
//
//   - TracesOff: no trace log (the default).
//   - TracesBatched: a background writer appends and fsyncs batches every
//     100ms, or sooner when 4,096 traces are pending. The call does no
//     file I/O. A crash loses the traces of the last 100ms or so: those
//     not yet in a written batch.
//   - TracesSync: a call returns only after its trace is fsynced. Callers
//     that wait at the same time share one write and one fsync (group
//     commit). A crash loses no trace of a call that returned.
const (
	TracesOff TraceMode = iota
	TracesBatched
	TracesSync
)

// String returns "off", "batched" or "sync".
func (m TraceMode) String() string {
	switch m {
	case TracesOff:
		return "off"
	case TracesBatched:
		return "batched"
	case TracesSync:
		return "sync"
	}
	return fmt.Sprintf("TraceMode(%d)", int(m))
}

const (
	traceFlushEvery = 100 * time.Millisecond
	traceFlushAt    = 4096
)

// traceBatch lets sync-mode callers wait for the batch their trace is in.
type traceBatch struct {
	done chan struct{}
	err  error
}

// traceEncoder encodes traces as JSON lines. It remembers the formatted
// second of the last time it wrote, which the traces of a batch share.
type traceEncoder struct {
	sec    int64
	prefix []byte // "2006-01-02T15:04:05" of sec
}

// appendJSON appends t as one line of the trace log, as encoding/json
// would encode its traceLine (with HTML escaping off), without reflection
// or allocation (but for an agent ID that is not UTF-8).
func (e *traceEncoder) appendJSON(b []byte, t *Trace) []byte {
	b = append(b, `{"time":"`...)
	b = e.appendTime(b, t.Time.UTC())
	b = append(b, `","agent_id":`...)
	b = appendJSONString(b, t.AgentID)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(t.Version), 10)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, string(t.Outcome))
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, int64(t.Duration), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	if t.Err != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, t.Err)
	}
	if !utf8.ValidString(t.AgentID) {
		b = append(b, `,"agent_id_b64":"`...)
		b = base64.StdEncoding.AppendEncode(b, []byte(t.AgentID))
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// appendTime appends t (in UTC) as time.RFC3339Nano does.
func (e *traceEncoder) appendTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 1000 || y > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano) // rare: no shortcut
	}
	if sec := t.Unix(); sec != e.sec || e.prefix == nil {
		e.sec, e.prefix = sec, t.AppendFormat(e.prefix[:0], "2006-01-02T15:04:05")
	}
	b = append(b, e.prefix...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i >= 1; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, 'Z')
}

// appendJSONString appends s as a JSON string the way encoding/json does
// with HTML escaping off: invalid UTF-8 becomes U+FFFD, and control
// characters, U+2028 and U+2029 are escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
