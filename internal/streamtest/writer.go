package streamtest

import (
	"io"
	"net/http"
	"strings"
)

// writer answers one request with server-sent events.
type writer struct {
	w       http.ResponseWriter
	r       *http.Request
	started bool
}

// send writes events, each followed by the blank line that ends it, and
// flushes them; the first send writes the 200 and its headers.
func (w *writer) send(events ...string) {
	if !w.started {
		w.started = true
		w.w.Header().Set("Content-Type", "text/event-stream")
		w.w.Header().Set("Cache-Control", "no-cache")
		w.w.WriteHeader(http.StatusOK)
	}
	for _, ev := range events {
		io.WriteString(w.w, strings.TrimRight(ev, "\n")+"\n\n")
	}
	w.w.(http.Flusher).Flush()
}

// hang waits until the client leaves.
func (w *writer) hang() { <-w.r.Context().Done() }

// wait waits for ch to close, or the client to leave.
func (w *writer) wait(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-w.r.Context().Done():
	}
}

// cut closes the connection without ending the response: the client
// reads a body cut short.
func (w *writer) cut() {
	conn, _, err := w.w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}
