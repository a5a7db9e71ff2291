// Package oaicompat is what the framework adapters (integrations/eino,
// integrations/genkit, integrations/langchaingo) share about an
// OpenAI-compatible API seen through an HTTP client: a Capture of each
// attempt's response (a failed one's status, headers and error body, for
// the *failure.APIError the adapter returns), and a Body that watches a
// streamed answer for its final "data: [DONE]" and its first error event.
package oaicompat

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// MaxErrorBody bounds the error body a Capture keeps, and the line of a
// stream a Body reads.
const MaxErrorBody = 64 << 10

type captureKey struct{}

// Capture is what the transport saw of one attempt's response. Stream
// says the attempt streams: its 2xx body is watched (Watched).
type Capture struct {
	Stream bool
	mu     sync.Mutex
	status int
	header http.Header
	body   []byte
	watch  *Body
}

// Context returns ctx carrying c, for Transport and From.
func (c *Capture) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, captureKey{}, c)
}

// From returns the Capture ctx carries, or nil.
func From(ctx context.Context) *Capture {
	c, _ := ctx.Value(captureKey{}).(*Capture)
	return c
}

// Watched returns the streamed body Watch wrapped, or nil.
func (c *Capture) Watched() *Body {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watch
}

// Watch wraps resp's body in a Body, noted as Watched, when the attempt
// streams and resp is a 2xx with a body.
func (c *Capture) Watch(resp *http.Response) {
	if !c.Stream || resp == nil || resp.Body == nil || resp.StatusCode >= 300 {
		return
	}
	b := &Body{ReadCloser: resp.Body}
	resp.Body = b
	c.mu.Lock()
	c.watch = b
	c.mu.Unlock()
}

// Transport returns a RoundTripper over base that notes each response in
// the Capture its request's context carries (none: it passes the
// response as it is): it watches a 2xx body (Watch), and keeps a 4xx or
// 5xx response's status, headers and body (its first MaxErrorBody
// bytes), giving the caller a copy of the body it kept.
func Transport(base http.RoundTripper) http.RoundTripper { return transport{base} }

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	c := From(req.Context())
	if c == nil || resp == nil || resp.StatusCode < 400 {
		if c != nil {
			c.Watch(resp)
		}
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	c.status, c.header, c.body = resp.StatusCode, resp.Header.Clone(), body
	c.mu.Unlock()
	return resp, err
}

// Failed reports whether the transport saw an HTTP error.
func (c *Capture) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status != 0
}

// Wrap returns err as a *failure.APIError of provider when the transport
// saw an HTTP error (the status, the provider's code and the wait its
// headers or body ask for), else unchanged.
func (c *Capture) Wrap(provider string, err error) error {
	c.mu.Lock()
	status, header, body := c.status, c.header, c.body
	c.mu.Unlock()
	if status == 0 {
		return err
	}
	h := &Failure{Err: err, Status: status, Body: string(body)}
	pe, _ := failure.ProviderErrorOf(h)
	e := &failure.APIError{Provider: provider, Err: err, Status: status, Code: pe.Code, Type: pe.Type, Class: failure.Classify(h), Message: pe.Message}
	if e.Wait, _ = failure.HeaderWait(header, status, time.Now()); e.Wait == 0 {
		e.Wait, _ = failure.ErrorWait(h)
	}
	return e
}

// Event returns the *failure.APIError (Status 200) of provider for the
// error event data of a stream (`{"error": {...}}`), wrapping err with
// the event as its body.
func Event(provider string, err error, data []byte) error {
	h := &Failure{Err: err, Status: http.StatusOK, Body: string(data)}
	pe, _ := failure.ProviderErrorOf(h)
	return &failure.APIError{Provider: provider, Err: h, Status: http.StatusOK, Code: pe.Code, Type: pe.Type, Class: failure.Classify(h), Message: pe.Message}
}

// Failure is a client's error with the response it flattened, for
// package failure to read: the status and the provider's error body.
type Failure struct {
	Err    error
	Status int
	Body   string
}

func (e *Failure) Error() string   { return e.Err.Error() }
func (e *Failure) Unwrap() error   { return e.Err }
func (e *Failure) StatusCode() int { return e.Status }
func (e *Failure) RawJSON() string { return e.Body }
