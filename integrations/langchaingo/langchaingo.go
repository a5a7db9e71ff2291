// Package langchaingo runs langchaingo (github.com/tmc/langchaingo)
// model calls under the selfimprove loop. New wraps an llms.Model: each
// GenerateContent call (and so each chain, agent step or
// llms.GenerateFromSinglePrompt that uses it) runs through
// Loop.ExecuteWithImprovement, under the agent's config:
//
//   - Config.Route picks the model, through Options.Routes (the route
//     ladder), given to the inner model with llms.WithModel;
//   - Config.Timeout, MaxAttempts and Backoff are enforced by the loop.
//     langchaingo's OpenAI client makes no retries of its own; for a
//     provider client that does, turn them off;
//   - HTTPClient keeps what langchaingo's errors drop (the status, the
//     provider's error code and the Retry-After headers), so that the
//     loop classifies and paces each failure as for the SDK adapters;
//   - a streamed call (llms.WithStreamingFunc) reports its first chunk to
//     the loop (stream.FirstToken), so Config.FirstTokenTimeout bounds the
//     wait for it;
//   - Options.Check fails an answer the caller cannot use as a bad output
//     (failure.BadOutput), which the loop retries.
//
// The agent ID is Options.AgentID, one per wrapped model, unless the
// call's context names another (WithAgentID): give each step of a chain
// its own ID when its calls differ.
package langchaingo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/stream"
	"github.com/tmc/langchaingo/llms"
)

// Options configures New.
type Options struct {
	// AgentID is the agent the calls are booked under, unless a call's
	// context names another (WithAgentID). Required.
	AgentID string
	// Routes maps the agent's Config.Route to the model to call
	// (Routes.Model). Default zero: Config.Route itself is the model
	// when set; with no route, the call keeps the model the caller chose.
	// Give the loop the same ladder (selfimprove.WithRoutes or
	// Loop.SetRoutes) for it to move the agent down it and back.
	Routes si.Routes
	// Check, when not nil, checks each answer: an error fails the
	// attempt as a bad output (failure.BadOutput), which the loop
	// retries at once. Default nil: every answer is taken.
	Check func(*llms.ContentResponse) error
}

// Model is an llms.Model whose calls run under the selfimprove loop.
type Model struct {
	loop  *si.Loop
	inner llms.Model
	o     Options
}

var _ llms.Model = (*Model)(nil)

// ErrNoAgentID is returned by New for Options without an AgentID.
var ErrNoAgentID = errors.New("langchaingo adapter: Options.AgentID is required")

// New returns inner wrapped so that each call runs through loop. Make
// inner's HTTP client with HTTPClient (openai.WithHTTPClient) for the loop
// to see the provider's status, code and Retry-After.
func New(loop *si.Loop, inner llms.Model, o Options) (*Model, error) {
	if o.AgentID == "" {
		return nil, ErrNoAgentID
	}
	return &Model{loop: loop, inner: inner, o: o}, nil
}

type agentKey struct{}

// WithAgentID returns ctx with the agent ID the calls made with it are
// booked under, instead of Options.AgentID: a chain step's own ID.
func WithAgentID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, agentKey{}, id)
}

// GenerateContent runs inner's GenerateContent through the loop under
// the agent's config, and returns the answer of the attempt that
// succeeded, or the last attempt's error (an *Error for an HTTP error
// the transport saw).
func (m *Model) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	id, _ := ctx.Value(agentKey{}).(string)
	if id == "" {
		id = m.o.AgentID
	}
	var out *llms.ContentResponse
	_, err := m.loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
		model := cfg.Route
		if m.o.Routes.Primary != "" || len(m.o.Routes.Models) > 0 {
			model = m.o.Routes.Model(cfg)
		}
		resp, err := Generate(ctx, m.inner, model, messages, options...)
		if err == nil && m.o.Check != nil {
			if cerr := m.o.Check(resp); cerr != nil {
				return failure.BadOutput(cerr)
			}
		}
		if err == nil {
			out = resp
		}
		return err
	})
	return out, err
}

// Call is llms.GenerateFromSinglePrompt through GenerateContent.
func (m *Model) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, options...)
}

// Generate makes one attempt: inner's GenerateContent on model (none: the
// caller's), with the first streamed chunk reported to the loop and the
// error mapped as an *Error when the transport of HTTPClient saw an HTTP
// error. It is what Model runs in the loop's fn; use it in a fn of your
// own.
func Generate(ctx context.Context, inner llms.Model, model string, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var co llms.CallOptions
	for _, o := range options {
		o(&co)
	}
	opts := slices.Clip(options)
	if model != "" {
		opts = append(opts, llms.WithModel(model))
	}
	if f := co.StreamingFunc; f != nil {
		var once sync.Once
		opts = append(opts, llms.WithStreamingFunc(func(ctx2 context.Context, chunk []byte) error {
			if len(chunk) > 0 {
				once.Do(func() { stream.FirstToken(ctx) })
			}
			return f(ctx2, chunk)
		}))
	}
	c := &capture{}
	resp, err := inner.GenerateContent(context.WithValue(ctx, captureKey{}, c), messages, opts...)
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp, nil
}

// Error is a provider's HTTP error as the loop understands it: a
// failure.APIError whose Provider is "langchaingo", read from the
// response the transport of HTTPClient saw. It wraps langchaingo's error.
type Error = failure.APIError

// HTTPClient returns the HTTP client to give langchaingo's provider
// client (openai.WithHTTPClient): its transport is selfimprove.Transport
// over base (nil: http.DefaultTransport), and keeps the status, headers
// and error body (its first 64 KiB) of a failed response for the error
// Generate returns.
func HTTPClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &captureTransport{base: si.Transport(base)}}
}

type captureKey struct{}

// capture is what the transport saw of an attempt's failed response.
type capture struct {
	mu     sync.Mutex
	status int
	header http.Header
	body   []byte
}

// captureTransport notes a failed response in the request's capture.
type captureTransport struct{ base http.RoundTripper }

// maxErrorBody bounds the error body a capture keeps.
const maxErrorBody = 64 << 10

// RoundTrip implements http.RoundTripper.
func (t *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	c, _ := req.Context().Value(captureKey{}).(*capture)
	if c == nil || resp == nil || resp.StatusCode < 400 {
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
