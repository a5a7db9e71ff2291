package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// hostile holds C1 controls and bidi overrides, which a terminal obeys.
const hostile = "a\u0085b\u009bc\u202ed\u2066e\u200ff\u061cg"

// TestCellControls: terminal output never carries C1 controls or bidi
// controls (issue 29, item 9); they show as visible escapes.
func TestCellControls(t *testing.T) {
	got := cell(hostile + "\x1b[31m\t\n\x7f")
	for _, r := range got {
		if r < ' ' || r >= 0x7f && r <= 0x9f || testBidi(r) {
			t.Fatalf("cell(%q) = %q: keeps %U", hostile, got, r)
		}
	}
	if !strings.Contains(got, `\u202e`) || !strings.Contains(got, `\u0085`) {
		t.Errorf("cell(%q) = %q: the controls are not shown as escapes", hostile, got)
	}
}

// TestTerminalHostileText: the reproduction of item 9, through a real
// loop: error texts and reasons with C1 and bidi controls reach no
// terminal output of events, agent or proposals.
func TestTerminalHostileText(t *testing.T) {
	dir := t.TempDir()
	clk := time.Now().Add(-time.Hour)
	l, c := openLoop(t, dir, clk)
	_ = l.SetThreshold("h", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute})
	for range 8 {
		l.ExecuteWithImprovement(context.Background(), "h", func(context.Context, si.Config) error {
			return errors.New("upstream 503 " + hostile)
		})
		c.Advance(time.Second)
	}
	if err := l.Reject(firstProposal(t, l), "no "+hostile); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"events", "--dir", dir}, {"agent", "h", "--dir", dir}, {"proposals", "--dir", dir}, {"status", "--dir", dir}} {
		out := ok(t, nil, nil, args...)
		for _, r := range out {
			if r >= 0x80 && r <= 0x9f || testBidi(r) {
				t.Errorf("%q prints %U:\n%s", args, r, out)
				break
			}
		}
	}
}

func firstProposal(t *testing.T, l *si.Loop) string {
	t.Helper()
	ps := l.Proposals(nil)
	if len(ps) == 0 {
		t.Fatal("no proposal")
	}
	return ps[0].ID
}

// TestRedirectKeepsToken: the CLI never sends the token to another
// origin; a redirect across origins is refused with one line (item 6).
func TestRedirectKeepsToken(t *testing.T) {
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"agents":[]}`))
	}))
	defer other.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	fails(t, []string{"SELFIMPROVE_TOKEN=" + token}, 1, "redirect", "agents", "--url", redir.URL)
	select {
	case a := <-got:
		t.Errorf("the other origin got Authorization %q", a)
	default:
	}
}

// TestDirReadersRefuseSpecialFiles: with --dir, a symlinked or FIFO
// events.jsonl is refused at once, as the store refuses it (item 8).
func TestDirReadersRefuseSpecialFiles(t *testing.T) {
	for _, kind := range []string{"symlink", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir)
			log := filepath.Join(dir, "events.jsonl")
			if err := os.Rename(log, log+".real"); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == "symlink" {
				err = os.Symlink(log+".real", log)
			} else {
				err = syscall.Mkfifo(log, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, args := range [][]string{{"events", "--dir", dir}, {"status", "--dir", dir}} {
				cmd := exec.CommandContext(ctx, bin, args...)
				out, err := cmd.CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("%q hangs on a %s events.jsonl", args, kind)
				}
				if err == nil || !strings.Contains(string(out), "events.jsonl") {
					t.Errorf("%q over a %s events.jsonl: %v %q", args, kind, err, out)
				}
			}
		})
	}
}

// TestServeReadOnlyToken: serve --read-only with a token set keeps every
// read behind it, and says so (item 1).
func TestServeReadOnlyToken(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--read-only", "--dir", dir, "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "reads need the token") {
		t.Errorf("serve --read-only line: %q", line)
	}
	u := strings.TrimSuffix(strings.Fields(line[strings.Index(line, "http://"):])[0], "/")
	for _, p := range []string{"/api/agents", "/api/proposals?status=pending", "/metrics", "/api/events/stream", "/api/events"} {
		resp, err := http.Get(u + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", p, resp.StatusCode)
		}
	}
	ok(t, []string{"SELFIMPROVE_TOKEN=" + token}, nil, "agents", "--url", u)
}

// testBidi reports the bidi controls: the marks and the embeddings,
// overrides and isolates.
func testBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// openFiles counts this process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// serveTest serves dir as serve does, with lim, on a loopback port.
func serveTest(t *testing.T, dir string, readOnly bool, lim limits) string {
	t.Helper()
	h, closeH, err := serveHandler(dir, readOnly, adminOpts(lim))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h, lim, quiet())
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); closeH() })
	return ln.Addr().String()
}

// TestServeIdleConnections: 1,000 idle keep-alive connections, and
// slow-body POSTs, are closed within serve's timeouts (item 3).
func TestServeIdleConnections(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	lim := defaultLimits
	lim.idle, lim.read = 300*time.Millisecond, 300*time.Millisecond
	addr := serveTest(t, dir, false, lim)
	before := openFiles(t)
	const n = 1000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 0 { // an idle keep-alive connection after a request for a public file
			fmt.Fprintf(c, "GET /app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		} else { // a POST whose body never comes
			fmt.Fprintf(c, "POST /api/agents/a/critical HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		}
	}
	peak := openFiles(t)
	start := time.Now()
	for i, c := range conns {
		c.SetReadDeadline(start.Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("connection %d still open %v after the 300ms idle and read timeouts: %v", i, time.Since(start), err)
		}
		c.Close()
	}
	took := time.Since(start)
	deadline := time.Now().Add(5 * time.Second)
	after := openFiles(t)
	for after > before+10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		after = openFiles(t)
	}
	t.Logf("%d connections: open files %d -> %d -> %d; all closed by the server within %v", n, before, peak, after, took)
	if after > before+10 {
		t.Errorf("open files %d after the connections closed, %d before", after, before)
	}
}

// TestServeReadOnlyStreamsShareOneLoop: the event streams of serve
// --read-only share one Loop: 200 streams cost little memory each
// (item 3; a Loop each took about 100 KB).
func TestServeReadOnlyStreamsShareOneLoop(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	n := 200
	if s := os.Getenv("STREAMS"); s != "" {
		fmt.Sscan(s, &n)
	}
	lim := defaultLimits
	lim.maxStreams = n + 1
	addr := serveTest(t, dir, true, lim)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var ms runtime.MemStats
	mem := func() int64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse + ms.StackInuse)
	}
	var heap0 int64
	var g0 int
	for i := range n + 1 {
		if i == 1 { // after the first, which opens the shared Loop
			heap0, g0 = mem(), runtime.NumGoroutine()
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /api/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		br := bufio.NewReader(c)
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("stream: %q %v", line, err)
		}
	}
	heap, g := mem(), runtime.NumGoroutine()
	per := (heap - heap0) / int64(n)
	t.Logf("%d read-only streams: heap and stacks in use %.1f -> %.1f MB (%d bytes a stream), goroutines %d -> %d",
		n, float64(heap0)/1e6, float64(heap)/1e6, per, g0, g)
	// A stream is its connection's goroutine and its background read; a
	// Loop each would add the Loop's own.
	if g-g0 > 2*n+10 {
		t.Errorf("%d goroutines for %d read-only streams: a Loop each?", g-g0, n)
	}
}

func adminOpts(lim limits) admin.Options {
	return admin.Options{Logger: quiet(), MaxStreams: lim.maxStreams}
}

// startServe runs the built command's serve on a loopback port with args
// and env, and returns its URL (without a trailing slash) and the line it
// printed.
func startServe(t *testing.T, env []string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait(); cancel() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "http://") {
		t.Fatalf("serve %q: %q %v", args, line, err)
	}
	return strings.TrimSuffix(strings.Fields(line[strings.Index(line, "http://"):])[0], "/"), line
}

// TestServeFlags: the serve binary's Host check (--allow-host), stream
// bound (--max-streams) and idle timeout (--idle-timeout) hold on the
// wire (issue 29, items 2 and 3: `curl -H 'Host: rebind.attacker.example:
// PORT' 127.0.0.1:PORT/api/proposals?status=pending` answered).
func TestServeFlags(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	u, _ := startServe(t, nil, "--dir", dir, "--allow-host", "admin.example.com", "--max-streams", "1", "--idle-timeout", "200ms")
	port := u[strings.LastIndex(u, ":")+1:]
	get := func(host, path string) *http.Response {
		req, _ := http.NewRequest("GET", u+path, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for host, want := range map[string]int{"rebind.attacker.example:" + port: http.StatusMisdirectedRequest,
		"admin.example.com:" + port: http.StatusOK, "127.0.0.1:" + port: http.StatusOK} {
		res := get(host, "/api/proposals?status=pending")
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET /api/proposals?status=pending with Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
	s1 := get("127.0.0.1:"+port, "/api/events/stream")
	defer s1.Body.Close()
	s2 := get("127.0.0.1:"+port, "/api/events/stream")
	s2.Body.Close()
	if s1.StatusCode != http.StatusOK || s2.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("two streams with --max-streams 1: %d, %d; want 200, 503", s1.StatusCode, s2.StatusCode)
	}
	c, err := net.Dial("tcp", u[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	start := time.Now()
	c.SetReadDeadline(start.Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("a keep-alive connection still open %v after --idle-timeout 200ms: %v", time.Since(start), err)
	}
	t.Logf("a keep-alive connection closed by serve %v after its request (--idle-timeout 200ms)", time.Since(start))
}

// TestDirEventLogBounded: with --dir, at most the last 128 MiB of
// events.jsonl are read (item 8, "size-bounded"): of a log whose events
// are written twice, 130 MiB apart (a sparse file), only the last copy is
// read.
func TestDirEventLogBounded(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	log := filepath.Join(dir, "events.jsonl")
	evs, err := os.ReadFile(log)
	if err != nil || len(evs) == 0 {
		t.Fatalf("the fixture's event log: %d bytes, %v", len(evs), err)
	}
	once := strings.Count(ok(t, nil, nil, "events", "--dir", dir, "--limit", "1000"), "\n")
	f, err := os.OpenFile(log, os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	const gap = 130 << 20 // zeros: one long line, ended just before the second copy
	if _, err := f.WriteAt(append([]byte("\n"), evs...), int64(len(evs))+gap); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(ok(t, nil, nil, "events", "--dir", dir, "--limit", "1000"), "\n"); n != once {
		t.Errorf("events over a 130 MiB log whose events are written twice: %d lines, %d over the events once", n, once)
	}
}

// TestServeStartupLine: the line serve prints says whether reads are open,
// in each mode (item 1), and a read answers as it says.
func TestServeStartupLine(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
		read int
	}{
		{nil, nil, "reads open to anyone who can reach the address", http.StatusOK},
		{nil, []string{"--read-only"}, "read-only, no token: reads open to anyone", http.StatusOK},
		{[]string{"SELFIMPROVE_TOKEN=" + token}, nil, "reads and mutations need the token", http.StatusUnauthorized},
		{[]string{"SELFIMPROVE_TOKEN=" + token}, []string{"--read-only"}, "read-only: reads need the token", http.StatusUnauthorized},
	} {
		dir := t.TempDir() // an owner holds the lock until the test ends
		writeState(t, dir)
		u, line := startServe(t, c.env, append([]string{"--dir", dir}, c.args...)...)
		if !strings.Contains(line, c.want) {
			t.Errorf("serve %q with %q: %q, want %q", c.args, c.env, line, c.want)
		}
		res, err := http.Get(u + "/api/agents")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.read {
			t.Errorf("serve %q with %q: GET /api/agents without a token %d, want %d", c.args, c.env, res.StatusCode, c.read)
		}
	}
}
