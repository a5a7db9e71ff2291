// Package usage watches a response body, as its client reads it, for the
// token usage it reports: the integrations price it (price.Table)
// and report it as the call's cost.
package usage

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"sync"
)

// MaxJSON bounds the JSON body a watch keeps to read its usage, and the
// line of an event stream it reads: a larger one reports no usage.
const MaxJSON = 8 << 20

// Watch wraps resp's body, when resp is a 2xx with a JSON or
// event-stream body, so that as its client reads it note is given each
// JSON document that may carry a usage (the whole body of a JSON
// response, read to its end; each data line of an event stream that
// mentions "usage"), and done is called once, when the body ends or is
// closed. It reports whether it wrapped the body.
func Watch(resp *http.Response, note func(data []byte), done func()) bool {
	if resp == nil || resp.Body == nil || resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return false
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var sse bool
	switch mt {
	case "text/event-stream":
		sse = true
	case "application/json", "":
	default:
		return false
	}
	resp.Body = &body{ReadCloser: resp.Body, sse: sse, note: note, done: done}
	return true
}

// body is a watched body.
type body struct {
	io.ReadCloser
	sse   bool
	note  func([]byte)
	done  func()
	mu    sync.Mutex
	buf   []byte // the JSON body, or the stream's line
	over  bool   // the JSON body, or the line, outgrew MaxJSON
	ended bool
}

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return n, err
	}
	if b.sse {
		for _, c := range p[:n] {
			if c == '\n' || c == '\r' {
				b.line()
			} else if len(b.buf) < MaxJSON {
				b.buf = append(b.buf, c)
			} else {
				b.over = true
			}
		}
	} else if len(b.buf)+n <= MaxJSON {
		b.buf = append(b.buf, p[:n]...)
	} else {
		b.over = true
	}
	if err != nil {
		if err == io.EOF {
			if b.sse {
				b.line()
			} else if !b.over {
				b.note(b.buf)
			}
		}
		b.end()
	}
	return n, err
}

// line notes the stream's line read, and starts the next.
func (b *body) line() {
	data, ok := bytes.CutPrefix(b.buf, []byte("data:"))
	if ok && !b.over && bytes.Contains(data, []byte(`"usage"`)) {
		b.note(bytes.TrimSpace(data))
	}
	b.buf, b.over = b.buf[:0], false
}

// end calls done, once; b.mu is held.
func (b *body) end() {
	if !b.ended {
		b.ended = true
		b.buf = nil
		b.done()
	}
}

// Close implements io.Closer: a stream closed before its end reports the
// usage it carried so far.
func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.mu.Lock()
	if b.sse {
		b.end()
	} else {
		b.ended = true // a JSON body not read to its end: no usage
	}
	b.mu.Unlock()
	return err
}
