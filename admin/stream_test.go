package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// sse is one server-sent event.
type sse struct{ id, event, data string }

// readSSE sends the events read from a stream to a channel, closed at its
// end.
func readSSE(body *bufio.Reader) <-chan sse {
	out := make(chan sse, 1024)
	go func() {
		defer close(out)
		var e sse
		for {
			line, err := body.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if e != (sse{}) {
					out <- e
				}
				e = sse{}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}()
	return out
}

// next returns the next event that is not a comment or retry line, or
// fails the test after 10 seconds.
func next(t *testing.T, c <-chan sse) sse {
	t.Helper()
	for {
		select {
		case e, ok := <-c:
			if !ok {
				t.Fatal("the stream ended")
			}
			if e.event == "" && e.data == "" {
				continue
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event in 10s")
		}
	}
}

// connect opens a stream; header is Last-Event-ID if not empty.
func (f *fixture) connect(t *testing.T, query, last string) <-chan sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/si/api/events/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return readSSE(bufio.NewReader(res.Body))
}

func TestStreamResumes(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	all := f.l.Events(si.EventFilter{})
	if len(all) < 3 {
		t.Fatalf("%d events", len(all))
	}
	c := f.connect(t, "", all[0].ID)
	for _, want := range all[1:] {
		e := next(t, c)
		var v admin.EventView
		if err := json.Unmarshal([]byte(e.data), &v); err != nil {
			t.Fatal(err)
		}
		if e.id != want.ID || e.event != string(want.Type) || v.ID != want.ID || v.AgentID != want.AgentID {
			t.Fatalf("got %+v, want %s %s", e, want.ID, want.Type)
		}
	}
	// Live, filtered to one agent.
	live := f.connect(t, "?agent=beta", "")
	f.l.MarkCritical("alpha", true)
	f.l.MarkCritical("beta", true)
	for _, c := range []<-chan sse{c} {
		if e := next(t, c); e.event != string(si.EventCriticalSet) || !strings.Contains(e.data, `"agent_id":"alpha"`) {
			t.Errorf("live: %+v", e)
		}
	}
	if e := next(t, live); e.event != string(si.EventCriticalSet) || !strings.Contains(e.data, `"agent_id":"beta"`) {
		t.Errorf("filtered: %+v", e)
	}
	// A change carries its reason.
	f.l.Rewind("alpha", 1, "resume test")
	for {
		e := next(t, c)
		if e.event == string(si.EventImprovementApplied) {
			if !strings.Contains(e.data, "resume test") {
				t.Errorf("change without its reason: %s", e.data)
			}
			break
		}
	}
	// The loop's end is told.
	f.l.Close()
	for {
		if e := next(t, c); e.event == "closed" {
			break
		}
	}
}

// blockingWriter is a ResponseWriter whose writes wait for release.
type blockingWriter struct {
	h       http.Header
	once    sync.Once
	writing chan struct{} // closed at the first write
	release chan struct{}
	mu      sync.Mutex
	body    strings.Builder
}

func (w *blockingWriter) Header() http.Header { return w.h }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Flush()              {}
func (w *blockingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

// TestStreamSlowClientDropped: a client that does not read is told and
// dropped, while calls and another client go on.
func TestStreamSlowClientDropped(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, StreamBuffer: 1})
	h := admin.Handler(f.l, admin.Options{Token: token, StreamBuffer: 1})
	w := &blockingWriter{h: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequest("GET", "http://localhost/api/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	<-w.writing // the slow client is subscribed, and stuck
	fast := f.connect(t, "", "")
	for i := range 5 {
		start := time.Now()
		f.l.MarkCritical("alpha", i%2 == 0) // each records an event
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a mutation waited %v on a stalled client", d)
		}
		if e := next(t, fast); e.event != string(si.EventCriticalSet) {
			t.Fatalf("fast client: %+v", e)
		}
	}
	traffic(t, f.l, f.clk, "alpha", 10, 0)
	close(w.release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the dropped client's handler did not return")
	}
	w.mu.Lock()
	body := w.body.String()
	w.mu.Unlock()
	if !strings.Contains(body, "event: dropped\n") || strings.Count(body, "event: critical_set") != 1 {
		t.Errorf("slow client got:\n%s", body)
	}
}
