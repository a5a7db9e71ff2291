package langchaingo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// Error is a provider's error as the loop understands it: a
// failure.APIError whose Provider is "langchaingo", read from the
// response the transport of HTTPClient saw (an HTTP error), or from the
// error event of a 200 stream (Status 200). It wraps langchaingo's error.
type Error = failure.APIError

// HTTPClient returns the HTTP client to give langchaingo's provider
// client (openai.WithHTTPClient): its transport is selfimprove.Transport
// over base (nil: http.DefaultTransport); it keeps the status, headers
// and error body (its first 64 KiB) of a failed response for the error
// Generate returns, and watches a streamed answer for its final event
// ("data: [DONE]") and for an error event.
func HTTPClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &captureTransport{base: si.Transport(base)}}
}

type captureKey struct{}

// capture is what the transport saw of an attempt's response.
type capture struct {
	stream bool // the attempt streams: watch its 2xx body
	mu     sync.Mutex
	status int
	header http.Header
	body   []byte
	watch  *streamBody
}

// context returns ctx carrying c, for the transport.
func (c *capture) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, captureKey{}, c)
}

// watched returns the streamed body the transport watched, or nil.
func (c *capture) watched() *streamBody {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watch
}

// captureTransport notes a response in the request's capture.
type captureTransport struct{ base http.RoundTripper }

// maxErrorBody bounds the error body a capture keeps, and the line of a
// stream a watch reads.
const maxErrorBody = 64 << 10

// RoundTrip implements http.RoundTripper.
func (t *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	c, _ := req.Context().Value(captureKey{}).(*capture)
	if c == nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode < 300 {
		if c.stream && resp.Body != nil {
			b := &streamBody{ReadCloser: resp.Body}
			resp.Body = b
			c.mu.Lock()
			c.watch = b
			c.mu.Unlock()
		}
		return resp, err
	}
	if resp.StatusCode < 400 {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	c.status, c.header, c.body = resp.StatusCode, resp.Header.Clone(), body
	c.mu.Unlock()
	return resp, err
}

// wrap returns err as an *Error when the transport saw an HTTP error,
// else unchanged.
func (c *capture) wrap(err error) error {
	c.mu.Lock()
	status, header, body := c.status, c.header, c.body
	c.mu.Unlock()
	if status == 0 {
		return err
	}
	h := &httpFailure{err: err, status: status, body: string(body)}
	pe, _ := failure.ProviderErrorOf(h)
	e := &Error{Provider: "langchaingo", Err: err, Status: status, Code: pe.Code, Type: pe.Type, Class: failure.Classify(h), Message: pe.Message}
	if e.Wait, _ = failure.HeaderWait(header, status, time.Now()); e.Wait == 0 {
		e.Wait, _ = failure.ErrorWait(h)
	}
	return e
}

// errEvent is the error an *Error of an error event wraps: langchaingo's
// OpenAI client skips the event and returns none.
var errEvent = errors.New("langchaingo adapter: error event in the stream")

// eventError returns the *Error (Status 200) of the error event data, a
// stream's `{"error": {...}}`.
func eventError(data []byte) error {
	h := &httpFailure{err: errEvent, status: http.StatusOK, body: string(data)}
	pe, _ := failure.ProviderErrorOf(h)
	return &Error{Provider: "langchaingo", Err: h, Status: http.StatusOK, Code: pe.Code, Type: pe.Type, Class: failure.Classify(h), Message: pe.Message}
}

// httpFailure is langchaingo's error with the response it flattened, for
// package failure to read: the status and the provider's error body.
type httpFailure struct {
	err    error
	status int
	body   string
}

func (e *httpFailure) Error() string   { return e.err.Error() }
func (e *httpFailure) Unwrap() error   { return e.err }
func (e *httpFailure) StatusCode() int { return e.status }
func (e *httpFailure) RawJSON() string { return e.body }

// streamBody is a streamed response body that notes, as it is read, a
// line "data: [DONE]" (or "data:[DONE]") and the first error event
// (`data: {"error": ...}`), which langchaingo's OpenAI client skips.
// Lines are read up to maxErrorBody bytes.
type streamBody struct {
	io.ReadCloser
	mu    sync.Mutex
	line  []byte
	done  bool
	event []byte // the first error event's data
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range p[:n] {
		switch {
		case c == '\n' || c == '\r':
			b.endLine()
		case len(b.line) < maxErrorBody:
			b.line = append(b.line, c)
		}
	}
	if err == io.EOF {
		b.endLine() // a last line without its newline
	}
	return n, err
}

// endLine notes the line read, and starts the next.
func (b *streamBody) endLine() {
	data, ok := bytes.CutPrefix(b.line, []byte("data:"))
	b.line = b.line[:0]
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		b.done = true
		return
	}
	if b.event != nil || !bytes.Contains(data, []byte(`"error"`)) {
		return
	}
	var ev struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) == nil && len(ev.Error) > 0 && string(ev.Error) != "null" {
		b.event = bytes.Clone(data)
	}
}

// result returns whether the body carried "data: [DONE]", and the first
// error event's data (nil: none).
func (b *streamBody) result() (final bool, event []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done, b.event
}
