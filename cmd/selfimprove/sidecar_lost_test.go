package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestSidecarPythonLostAnswer: the Python client reports through a proxy
// that passes its first batch to the real sidecar, which books it, and
// then drops the connection without the answer, as a timeout or a reset
// would. The client sends the batch again. Before, the sidecar booked
// those outcomes twice (50 calls made, 54 booked); now each report
// carries an ID, and the sidecar books each call once.
func TestSidecarPythonLostAnswer(t *testing.T) {
	python3(t)
	s := startSidecar(t, filepath.Join(t.TempDir(), "state"), "127.0.0.1:0")
	target, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var lost atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/outcomes" && lost.CompareAndSwap(0, 1) {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r) // the sidecar books the batch and answers
			if rec.Code != http.StatusOK {
				t.Errorf("the sidecar answered the first batch %d %s", rec.Code, rec.Body)
			}
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0) // a reset, with no answer
			conn.Close()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	const calls = 50
	lines := runPython(t, "sidecar_checks.py", "lost", "--url", proxy.URL, "--agent", "py-lost", "--calls", "50")
	if len(lines) != 1 {
		t.Fatalf("printed %v", lines)
	}
	l := lines[0]
	if lost.Load() != 1 || num(l, "outages") != 1 {
		t.Fatalf("no answer was lost: %v", l)
	}
	if num(l, "answers") != calls || num(l, "pending") != 0 || num(l, "dropped") != 0 {
		t.Errorf("client: %v; want %d answers, none pending or dropped", l, calls)
	}
	if d := agentDetail(t, s, "py-lost"); d.Stats.Calls != calls {
		t.Errorf("the sidecar booked %d calls of the %d made (%d failures)", d.Stats.Calls, calls, d.Stats.Failures)
	}
}
