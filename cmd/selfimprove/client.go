package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// maxAnswer bounds an answer of the admin API read by the client.
const maxAnswer = 64 << 20

// maxLogRead bounds what is read of the event log of --dir: its last
// 128 MiB (twice the store's default MaxLogSize, at which it rotates).
const maxLogRead = 128 << 20

// client reaches a loop through the admin API: over HTTP (--url), or
// in-process through admin.Handler on a Loop opened on a state directory
// (--dir). Every subcommand goes through it, so --url and --dir answer
// with the same JSON.
type client struct {
	base  string // URL of the admin handler's root, without a trailing slash
	hc    *http.Client
	token string
	// dir is the state directory (--dir); its event log is read
	// directly, since a Loop opened on it has no recent events.
	dir  string
	loop *selfimprove.Loop // with --dir
	ro   *readOnlyHandler  // with --dir, read-only
	// reported is set when the command reports the agents' state files
	// that cannot be read itself (reportUnreadable), with --dir.
	reported *atomic.Bool
}

// apiError is an error answer of the admin API.
type apiError struct {
	status int
	body   admin.ErrorBody
}

func (e *apiError) Error() string {
	msg := e.body.Error
	if msg == "" {
		msg = http.StatusText(e.status)
	}
	switch e.status {
	case http.StatusUnauthorized:
		return msg + ": set SELFIMPROVE_TOKEN or --token-file to the admin token"
	case http.StatusForbidden:
		if strings.HasPrefix(msg, "read-only:") || strings.HasPrefix(msg, "no token configured:") {
			return msg // the server's own word: no token the client sends would do
		}
		return msg + ": check the admin token (SELFIMPROVE_TOKEN or --token-file)"
	}
	return msg
}

// notFoundError is an unknown agent or proposal (exit code 3).
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// openURL returns a client of the admin handler at raw.
func openURL(raw, token string) (*client, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErr("--url: %q is not an http(s) URL", raw)
	}
	return &client{base: strings.TrimSuffix(raw, "/"), hc: &http.Client{CheckRedirect: sameOrigin}, token: token}, nil
}

// sameOrigin refuses a redirect to another origin (scheme, host and
// port), to which the client would send the token, and more than 10
// redirects.
func sameOrigin(req *http.Request, via []*http.Request) error {
	from := via[0].URL
	if req.URL.Scheme != from.Scheme || !strings.EqualFold(req.URL.Host, from.Host) {
		return fmt.Errorf("refused a redirect to another origin (%s://%s): give --url the admin handler's own URL", req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// openDir opens dir: read-only without its lock, or, for a mutation,
// with a Loop that takes the lock.
func openDir(dir string, write bool) (*client, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("state directory %s does not exist: pass --dir DIR or --url URL", dir)
		}
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state directory %s is not a directory", dir)
	}
	if err := checkStateDir(dir, "pass --dir DIR"); err != nil {
		return nil, err
	}
	// Problems of the loop are errors of the command: shown, one line each.
	reported := new(atomic.Bool)
	logger := slog.New(&reportedHandler{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), on: reported})
	token := newToken()
	opts := admin.Options{Token: token, Logger: logger}
	c := &client{base: "http://localhost", token: token, dir: dir, reported: reported} // in-process: a loopback Host
	if !write {
		// The ReadOnlyStore logs to slog.Default: the same format and
		// filter there, from Info, as the log package's lines go there too.
		slog.SetDefault(slog.New(&reportedHandler{Handler: slog.NewTextHandler(os.Stderr, nil), on: reported}))
		h, err := newReadOnlyHandler(dir, opts)
		if err != nil {
			return nil, fmt.Errorf("state directory %s: %w", dir, err)
		}
		c.ro = h
		c.hc = &http.Client{Transport: inProcess{h}}
		return c, nil
	}
	l, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithLogger(logger))
	if errors.Is(err, selfimprove.ErrLocked) {
		return nil, fmt.Errorf("state directory %s is in use by a running Loop: use --url to reach its admin API", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	c.loop = l
	c.hc = &http.Client{Transport: inProcess{admin.Handler(l, opts)}}
	return c, nil
}

// checkStateDir fails unless dir holds agents/, which a Loop's store
// makes when it opens a directory: reading another directory would show
// no agents, and log an error at each read. todo says what to do then.
func checkStateDir(dir, todo string) error {
	fi, err := os.Stat(filepath.Join(dir, "agents"))
	if err == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("%s is not a state directory: it has no agents/ (a state directory, made by a Loop's WithDir, holds agents/ and events.jsonl): %s", dir, todo)
}

// openReadOnly opens a Loop that reads dir without its lock.
func openReadOnly(dir string, logger *slog.Logger) (*selfimprove.Loop, error) {
	ro, err := selfimprove.OpenReadOnlyStore(dir)
	if err != nil {
		return nil, err
	}
	return selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil), selfimprove.WithLogger(logger))
}

// readOnlyHandler serves each request with admin.Handler on a Loop opened
// read-only for it, so that a long-running reader (mcp, serve
// --read-only) answers from the directory as it is now: a Loop keeps the
// failure memory and the agents with proposals it read. The Loops share
// one ReadOnlyStore (and its index of the agents). The event streams
// share one Loop, opened at the first and closed by Close, and one
// admin.Handler, whose Options.MaxStreams bounds them all. Mutations are
// refused with 403.
type readOnlyHandler struct {
	store *selfimprove.ReadOnlyStore
	opts  admin.Options

	mu     sync.Mutex
	loop   *selfimprove.Loop // the streams' Loop
	stream http.Handler
	closed bool // by Close: no more streams
}

func newReadOnlyHandler(dir string, opts admin.Options) (*readOnlyHandler, error) {
	ro, err := selfimprove.OpenReadOnlyStore(dir)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &readOnlyHandler{store: ro, opts: opts}, nil
}

// open opens a Loop on the shared store.
func (h *readOnlyHandler) open() (*selfimprove.Loop, error) {
	return selfimprove.New(selfimprove.WithStore(h.store), selfimprove.WithNotifier(nil), selfimprove.WithLogger(h.opts.Logger))
}

func (h *readOnlyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		refuse(w, http.StatusForbidden, "read-only: mutations are disabled (serve without --read-only, or use the Loop's own admin API)")
		return
	}
	if r.URL.Path == "/api/events/stream" {
		sh, err := h.streams()
		if errors.Is(err, selfimprove.ErrClosed) {
			refuse(w, http.StatusServiceUnavailable, "the loop is closed")
			return
		}
		if err != nil {
			h.opts.Logger.Error("selfimprove: open the state directory", "error", err)
			refuse(w, http.StatusInternalServerError, "cannot read the state directory")
			return
		}
		sh.ServeHTTP(w, r)
		return
	}
	l, err := h.open()
	if err != nil {
		h.opts.Logger.Error("selfimprove: open the state directory", "error", err)
		refuse(w, http.StatusInternalServerError, "cannot read the state directory")
		return
	}
	defer l.Close()
	admin.Handler(l, h.opts).ServeHTTP(w, r)
}

// streams returns the handler of the event streams, over the shared Loop.
func (h *readOnlyHandler) streams() (http.Handler, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, selfimprove.ErrClosed
	}
	if h.stream == nil {
		l, err := h.open()
		if err != nil {
			return nil, err
		}
		h.loop, h.stream = l, admin.Handler(l, h.opts)
	}
	return h.stream, nil
}

// Close closes the streams' Loop, which ends the streams; a stream asked
// for afterwards is refused with 503.
func (h *readOnlyHandler) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.loop == nil {
		return nil
	}
	err := h.loop.Close()
	h.loop = nil
	return err
}

// refuse answers with status and an admin.ErrorBody.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(admin.ErrorBody{Error: msg, Status: status})
}

func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Close closes the Loop of --dir.
func (c *client) Close() error {
	if c.ro != nil {
		return c.ro.Close()
	}
	if c.loop == nil {
		return nil
	}
	return c.loop.Close()
}

// get GETs path?q and decodes the answer into v.
func (c *client) get(ctx context.Context, path string, q url.Values, v any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, v)
}

// post POSTs body as JSON to path and decodes the answer into v.
func (c *client) post(ctx context.Context, path string, body, v any) error {
	return c.do(ctx, http.MethodPost, path, nil, body, v)
}

func (c *client) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

func (c *client) do(ctx context.Context, method, path string, q url.Values, body, v any) error {
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the admin API: %w", err)
	}
	defer resp.Body.Close()
	return c.decodeAnswer(resp, v)
}

// decodeAnswer decodes resp into v, or returns its error: an apiError, or
// a noAPIError when it is not the admin API's answer (a 404 that is not
// the API's "no such agent" or "no such proposal", or a success that is
// not JSON).
func (c *client) decodeAnswer(resp *http.Response, v any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("the answer is larger than %d MiB", maxAnswer>>20)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{status: resp.StatusCode}
		isBody := json.Unmarshal(data, &e.body) == nil && e.body.Status == resp.StatusCode && e.body.Error != ""
		// The API's 404s name what was not found (Field); the handler's
		// "no such endpoint" names nothing: a path it does not serve.
		if resp.StatusCode == http.StatusNotFound && (!isBody || e.body.Field == "") {
			return c.noAPI(resp)
		}
		if !isBody {
			e.body = admin.ErrorBody{Error: fmt.Sprintf("%s (not an admin API answer: is the URL the admin handler's root?)", resp.Status)}
		}
		return e
	}
	if v == nil || json.Unmarshal(data, v) != nil {
		return c.noAPI(resp)
	}
	return nil
}

// noAPIError is an answer that is not the admin API's: the URL of --url
// does not serve the API, most often for a wrong mount path.
type noAPIError struct{ base, what string }

func (e *noAPIError) Error() string {
	return fmt.Sprintf("no selfimprove API at %s (%s): check the mount path: --url is the admin handler's root, "+
		"http://HOST:PORT/PREFIX for a handler mounted under /PREFIX/ (no PREFIX for selfimprove serve)", e.base, e.what)
}

func (c *client) noAPI(resp *http.Response) *noAPIError {
	what := resp.Status
	if resp.Request != nil && resp.Request.URL != nil {
		what = resp.Request.Method + " " + resp.Request.URL.Path + ": " + what
	}
	return &noAPIError{base: c.base, what: what}
}

// inProcess serves requests with a handler in this process.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	t.h.ServeHTTP(rec, req)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rec.status, http.StatusText(rec.status)), StatusCode: rec.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// events returns the last limit events that f keeps, oldest first: from
// the admin API, or with --dir from the event log.
func (c *client) events(ctx context.Context, f selfimprove.EventFilter, limit int) ([]admin.EventView, error) {
	if c.dir == "" {
		q := filterQuery(f)
		q.Set("limit", fmt.Sprint(limit))
		var list admin.EventList
		if err := c.get(ctx, "/api/events", q, &list); err != nil {
			return nil, err
		}
		return list.Events, nil
	}
	var out []admin.EventView
	_, err := c.readLog(0, func(e selfimprove.Event) {
		if f.Keeps(&e) {
			out = append(out, view(e))
			if len(out) > 2*limit {
				out = append(out[:0], out[len(out)-limit:]...)
			}
		}
	})
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, err
}

// readLog reads the event log of --dir from offset on, calls fn with each
// whole event, and returns the offset after the last whole line. A log
// shorter than offset (rotated) is read from its start.
func (c *client) readLog(offset int64, fn func(selfimprove.Event)) (int64, error) {
	// As the store opens it: never through a link, never waiting on a pipe.
	f, err := fsx.OpenRegular(filepath.Join(c.dir, "events.jsonl"), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return offset, fmt.Errorf("read the event log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return offset, fmt.Errorf("read the event log: %w", err)
	}
	if fi.Size() < offset {
		offset = 0
	}
	// At most the last maxLogRead bytes, from the first whole line there.
	if fi.Size()-offset > maxLogRead {
		offset = fi.Size() - maxLogRead
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return offset, fmt.Errorf("read the event log: %w", err)
		}
		skipped, err := readLine(bufio.NewReaderSize(f, 64<<10), 1<<20)
		if err != nil && !errors.Is(err, errLongLine) {
			return offset, nil // no whole line in it
		}
		offset += int64(len(skipped))
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, fmt.Errorf("read the event log: %w", err)
	}
	// Only whole lines: a line being appended is read on the next pass.
	br := bufio.NewReaderSize(io.LimitReader(f, fi.Size()-offset), 64<<10)
	for {
		line, err := readLine(br, 1<<20)
		if len(line) > 0 && line[len(line)-1] == '\n' {
			offset += int64(len(line))
			if _, err := selfimprove.ReadEvents(bytes.NewReader(line), func(e selfimprove.Event) error { fn(e); return nil }); err != nil {
				return offset, err
			}
		}
		if errors.Is(err, io.EOF) {
			return offset, nil
		}
		if errors.Is(err, errLongLine) {
			offset += int64(len(line))
			continue
		}
		if err != nil {
			return offset, fmt.Errorf("read the event log: %w", err)
		}
	}
}

var errLongLine = errors.New("line too long")

// readLine reads one line, with its newline; a line longer than limit is
// skipped (its bytes are counted in the returned slice's length only as
// far as they were read) and errLongLine returned.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			n := len(line) + len(chunk)
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = br.ReadSlice('\n')
				n += len(chunk)
			}
			if err != nil {
				return nil, err // a torn long line at the end: stop before it
			}
			return make([]byte, n), errLongLine
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func view(e selfimprove.Event) admin.EventView {
	return admin.EventView{Event: e, AgentRef: admin.Ref(e.AgentID)}
}

func filterQuery(f selfimprove.EventFilter) url.Values {
	q := url.Values{}
	for _, a := range f.AgentIDs {
		q.Add("agent", a)
	}
	for _, t := range f.Types {
		q.Add("type", string(t))
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	return q
}
