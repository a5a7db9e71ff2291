package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// deadlineConn is the server's side of a connection as a stream handler
// in a synctest bubble sees it: a ResponseWriter with write deadlines. It
// takes room bytes (the socket buffers; -1: all, a client that reads),
// then a write waits until its deadline and fails, as a client that reads
// nothing makes it; with no deadline set, it waits until release is
// closed. A write under a deadline already passed fails at once, as on a
// net.Conn.
type deadlineConn struct {
	h          http.Header
	release    chan struct{}
	mu         sync.Mutex
	deadline   time.Time
	room       int
	body       strings.Builder
	noDeadline int // writes made with no deadline set
}

func newDeadlineConn(room int) *deadlineConn {
	return &deadlineConn{h: http.Header{}, release: make(chan struct{}), room: room}
}

func (c *deadlineConn) Header() http.Header { return c.h }
func (c *deadlineConn) WriteHeader(int)     {}
func (c *deadlineConn) Flush()              {}

func (c *deadlineConn) SetWriteDeadline(d time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = d
	return nil
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	d := c.deadline
	if d.IsZero() {
		c.noDeadline++
	}
	switch {
	case !d.IsZero() && !time.Now().Before(d):
		c.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	case c.room < 0 || len(b) <= c.room:
		if c.room >= 0 {
			c.room -= len(b)
		}
		c.body.Write(b)
		c.mu.Unlock()
		return len(b), nil
	}
	c.mu.Unlock()
	if d.IsZero() {
		<-c.release // no deadline: it waits as long as the client stays
		return 0, net.ErrClosed
	}
	time.Sleep(time.Until(d))
	return 0, os.ErrDeadlineExceeded
}

// written returns what the client got, and the writes made with no
// deadline.
func (c *deadlineConn) written() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.body.String(), c.noDeadline
}

// bigConfig is a config whose params are near the loop's bound (2,048
// bytes of names and values), each value starting with tag.
func bigConfig(tag string) si.Config {
	c := si.Config{Timeout: 3 * time.Second, Params: map[string]string{}}
	for _, k := range strings.Fields("a b c d e f g h") {
		c.Params[k] = tag + strings.Repeat("x", 240)
	}
	return c
}

// TestStreamCutsAResumedClientThatNeverReads: a client that resumes with
// Last-Event-ID and then reads nothing is cut after WriteTimeout, and its
// MaxStreams slot freed. Before, the backlog (here 400 events, over 16
// KiB) overflowed the stream's 4 KiB buffer onto the connection before
// the first flush set a write deadline: behind an http.Server without a
// WriteTimeout the handler waited for ever and kept its slot. Now every
// write sets its deadline first.
func TestStreamCutsAResumedClientThatNeverReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newLoop(t)
		traffic(t, l, clk, "a", 3, 0)
		for i := range 400 {
			l.MarkCritical("a", i%2 == 0) // an event each
		}
		first := l.Events(si.EventFilter{Limit: 1000})[0].ID
		const timeout = 200 * time.Millisecond
		h := admin.Handler(l, admin.Options{SampleEvery: -1, WriteTimeout: timeout, MaxStreams: 1})
		c := newDeadlineConn(16 << 10)
		req := httptest.NewRequest("GET", "http://localhost/api/events/stream", nil)
		req.Header.Set("Last-Event-ID", first)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(c, req)
		}()
		time.Sleep(2 * timeout)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("a client that reads nothing was not cut after 2 WriteTimeouts")
		}
		close(c.release)
		<-done
		if _, n := c.written(); n > 0 {
			t.Errorf("%d writes went to the connection with no write deadline", n)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("HEAD", "http://localhost/api/events/stream", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("the next stream after the cut client: %d, want 200 (its slot freed)", rec.Code)
		}
	})
}

// TestStreamKeepsAReadingClientAfterIdle: a client that reads all the
// time is never cut, however long the stream idled. Before, after an idle
// spell longer than WriteTimeout (shorter than StreamKeepAlive, as the
// defaults 10 s and 15 s), an event over the stream's 4 KiB buffer (a
// rewind between configs with long params: the change carries both) went
// to the connection under the last flush's deadline, passed, and the
// stream ended; an event under 4 KiB waited for the flush, which set a
// new deadline, and went out. Now every write sets its deadline first.
func TestStreamKeepsAReadingClientAfterIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLoop(t)
		for _, tag := range []string{"v2", "v3"} {
			if err := l.SetConfig("alpha", bigConfig(tag)); err != nil {
				t.Fatal(err)
			}
		}
		const timeout = 300 * time.Millisecond
		h := admin.Handler(l, admin.Options{SampleEvery: -1, WriteTimeout: timeout, StreamKeepAlive: 10 * time.Second})
		c := newDeadlineConn(-1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(c, httptest.NewRequestWithContext(ctx, "GET", "http://localhost/api/events/stream", nil))
		}()
		for _, step := range []struct {
			what string
			act  func() error
			want si.EventType
		}{
			{"an event under 4 KiB", func() error { return l.MarkCritical("alpha", true) }, si.EventCriticalSet},
			{"an event over 4 KiB", func() error { _, err := l.Rewind("alpha", 2, "back to v2"); return err }, si.EventImprovementApplied},
		} {
			time.Sleep(2 * timeout) // idle: past WriteTimeout, before the keep-alive
			if err := step.act(); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			select {
			case <-done:
				t.Fatalf("%s after an idle spell ended the stream of a client that reads", step.what)
			default:
			}
			if body, _ := c.written(); !strings.Contains(body, "event: "+string(step.want)+"\n") {
				t.Fatalf("%s after an idle spell was not delivered; the client got:\n%.300s", step.what, body)
			}
		}
		body, _ := c.written()
		_, ev, _ := strings.Cut(body, "event: "+string(si.EventImprovementApplied)+"\ndata: ")
		if ev, _, _ = strings.Cut(ev, "\n"); len(ev) <= 4<<10 {
			t.Errorf("the change's event is %d bytes, not over the stream's 4 KiB buffer: the test tests nothing", len(ev))
		}
		cancel()
		<-done
	})
}

// TestStreamCutsAResumedClientThatNeverReadsTCP is
// TestStreamCutsAResumedClientThatNeverReads over a real connection: an
// http.Server without a WriteTimeout (as examples/admin serves it), small
// socket buffers, a client that asks for a backlog of 1,000 events of
// about 2 KB each and then reads nothing. Its connection is closed after
// WriteTimeout and the next stream is served. Before, the handler waited
// for ever in the backlog's write, with no deadline, and held the only
// MaxStreams slot.
func TestStreamCutsAResumedClientThatNeverReadsTCP(t *testing.T) {
	l, clk := newLoop(t)
	traffic(t, l, clk, "a", 3, 0)
	for i := range 1000 {
		if err := l.SetConfig("a", bigConfig(fmt.Sprint(i%2))); err != nil {
			t.Fatal(err)
		}
	}
	first := l.Events(si.EventFilter{Limit: 1000})[0].ID
	srv := httptest.NewUnstartedServer(admin.Handler(l, admin.Options{SampleEvery: -1, WriteTimeout: 200 * time.Millisecond, MaxStreams: 1}))
	srv.Listener = smallBuffers{srv.Listener} // a client that reads nothing blocks the server's writes soon
	closed := make(chan struct{}, 1)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() // before srv.Close: it ends a handler stuck in a write
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /api/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: %s\r\n\r\n", first)
	br := bufio.NewReaderSize(conn, 16)
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("%q %v", line, err)
	}
	// From here on the client reads nothing.
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection of a client that reads nothing is still open 10 s after WriteTimeout 200ms")
	}
	res, err := http.Head(srv.URL + "/api/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("the next stream after the cut client: %d, want 200 (its slot freed)", res.StatusCode)
	}
}

// smallBuffers is a listener whose connections have small send buffers.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}
