package eino

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	goopenai "github.com/meguminnnnnnnnn/go-openai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// Error is a provider's error as the loop understands it: a
// failure.APIError whose Provider is "eino", read from the response the
// transport of HTTPClient saw (an HTTP error), or from the error event
// of a 200 stream (Status 200). It wraps Eino's error.
type Error = failure.APIError

// HTTPClient returns the HTTP client to give Eino's OpenAI model
// (openai.ChatModelConfig's HTTPClient): its transport is
// selfimprove.Transport over base (nil: http.DefaultTransport); it keeps
// the status, headers and error body (its first 64 KiB) of a failed
// response for the error the wrapper returns, and notes whether a
// stream carried its final event ("data: [DONE]").
func HTTPClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &captureTransport{base: si.Transport(base)}}
}

type captureKey struct{}

// capture is what the transport saw of an attempt's response.
type capture struct {
	mu     sync.Mutex
	status int
	header http.Header
	body   []byte
	done   *doneBody // a 2xx body, watched for "data: [DONE]"
}

// context returns ctx carrying c, for the transport.
func (c *capture) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, captureKey{}, c)
}

// final reports whether the stream carried its final event: true when
// no transport of HTTPClient watched it.
func (c *capture) final() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done == nil || c.done.seen()
}

// captureTransport notes a response in the request's capture.
type captureTransport struct{ base http.RoundTripper }

// maxErrorBody bounds the error body a capture keeps.
const maxErrorBody = 64 << 10

// RoundTrip implements http.RoundTripper.
func (t *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	c, _ := req.Context().Value(captureKey{}).(*capture)
	if c == nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode < 300 {
		d := &doneBody{ReadCloser: resp.Body}
		resp.Body = d
		c.mu.Lock()
		c.done = d
		c.mu.Unlock()
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

// wrap returns err as an *Error when the transport saw an HTTP error or
// err holds a provider's error event, else unchanged.
func (c *capture) wrap(err error) error {
	c.mu.Lock()
	status, header, body := c.status, c.header, c.body
	c.mu.Unlock()
	if status == 0 {
		return eventError(err)
	}
	h := &httpFailure{err: err, status: status, body: string(body)}
	pe, _ := failure.ProviderErrorOf(h)
	e := &Error{Provider: "eino", Err: err, Status: status, Code: pe.Code, Type: pe.Type, Class: failure.Classify(h), Message: pe.Message}
	if e.Wait, _ = failure.HeaderWait(header, status, time.Now()); e.Wait == 0 {
		e.Wait, _ = failure.ErrorWait(h)
	}
	return e
}

// eventError returns err as an *Error of Status 200 when it holds the
// error event of a 200 stream (go-openai's *APIError without an HTTP
// status), else unchanged.
func eventError(err error) error {
	var ae *goopenai.APIError
	if !errors.As(err, &ae) || ae.HTTPStatusCode != 0 {
		return err
	}
	code := ""
	if ae.Code != nil {
		code = fmt.Sprint(ae.Code)
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": ae.Message, "type": ae.Type, "code": ae.Code}})
	h := &httpFailure{err: err, status: http.StatusOK, body: string(b)}
	return &Error{Provider: "eino", Err: err, Status: http.StatusOK, Code: code, Type: ae.Type, Class: failure.Classify(h), Message: ae.Message}
}

// httpFailure is Eino's error with the response it flattened, for
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

// doneBody is a response body that notes a line "data: [DONE]" (or
// "data:[DONE]") as it is read.
type doneBody struct {
	io.ReadCloser
	mu   sync.Mutex
	line []byte // the start of the current line, up to len(doneLine)
	done bool
}

const doneLine = "data: [DONE]"

func (b *doneBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range p[:n] {
		switch {
		case c == '\n' || c == '\r':
			b.line = b.line[:0]
		case len(b.line) < len(doneLine):
			b.line = append(b.line, c)
			if bytes.Equal(b.line, []byte(doneLine)) || bytes.Equal(b.line, []byte("data:[DONE]")) {
				b.done = true
			}
		}
	}
	return n, err
}

// seen reports whether the body carried "data: [DONE]".
func (b *doneBody) seen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}
