package admin

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// stream serves GET /api/events/stream: the events as server-sent events,
// each "id: <event ID>", "event: <type>", "data: <EventView JSON>". It
// resumes after the Last-Event-ID header (or the last_event_id query
// parameter) from the loop's recent events. A client that falls
// Options.StreamBuffer events behind gets an event "dropped" and is
// disconnected; when the loop closes, clients get an event "closed".
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	f, err := eventFilter(r.URL.Query())
	if err != nil {
		s.fail(w, err)
		return
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	if len(last) > 64 {
		s.fail(w, bad("Last-Event-ID", "Last-Event-ID is not an event ID"))
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, "", "too many event streams (admin.Options.MaxStreams); retry later")
		return
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout: the request is read.
	rc.SetReadDeadline(time.Time{})
	sub := s.l.Subscribe(last, s.o.StreamBuffer)
	defer sub.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// Every write that reaches the connection sets a fresh deadline
	// first: the backlog overflows bw before the first flush, and an
	// event over bw's size after an idle spell would else go out under
	// the last flush's deadline, long passed.
	dw := &deadlineWriter{w: w, rc: rc, timeout: s.o.WriteTimeout}
	bw := bufio.NewWriter(dw)
	flush := func() bool {
		return bw.Flush() == nil && dw.flush() == nil
	}
	bw.WriteString("retry: 2000\n\n")
	for i := range sub.Backlog {
		writeEvent(bw, &f, &sub.Backlog[i])
	}
	if !flush() {
		return
	}
	tick := time.NewTicker(s.o.StreamKeepAlive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				switch err := sub.Err(); {
				case errors.Is(err, selfimprove.ErrSubscriberBehind):
					bw.WriteString("event: dropped\ndata: {\"error\":\"the client fell behind; reconnect with Last-Event-ID\"}\n\n")
				case errors.Is(err, selfimprove.ErrClosed):
					bw.WriteString("event: closed\ndata: {\"error\":\"the loop is closed\"}\n\n")
				}
				flush()
				return
			}
			writeEvent(bw, &f, &ev)
			if len(sub.C) > 0 && bw.Buffered() < 32<<10 {
				continue // more to come: write them together
			}
		case <-tick.C:
			bw.WriteString(": keep-alive\n\n")
		case <-r.Context().Done():
			return
		}
		if !flush() {
			return
		}
	}
}

// deadlineWriter writes to w under a write deadline of timeout from now,
// set before each write and flush: a client that reads nothing for
// timeout is cut, one that reads is not, however long the stream idled.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.w.Write(b)
}

// flush sends what the server buffered of w.
func (d *deadlineWriter) flush() error {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.rc.Flush()
}

// writeEvent writes ev as one server-sent event, if f keeps it (its
// agents, types and times; paging does not apply to a stream).
func writeEvent(bw *bufio.Writer, f *selfimprove.EventFilter, ev *selfimprove.Event) {
	if !f.Keeps(ev) {
		return
	}
	b, err := json.Marshal(EventView{Event: *ev, AgentRef: Ref(ev.AgentID)})
	if err != nil {
		return
	}
	bw.WriteString("id: ")
	bw.WriteString(ev.ID)
	bw.WriteString("\nevent: ")
	bw.WriteString(string(ev.Type))
	bw.WriteString("\ndata: ")
	bw.Write(b)
	bw.WriteString("\n\n")
}
