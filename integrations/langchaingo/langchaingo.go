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
//     wait for it; through HTTPClient, a stream that ends without
//     "data: [DONE]" or carries an error event is a failure, retried;
//   - Options.Check fails an answer the caller cannot use as a bad output
//     (failure.BadOutput), which the loop retries;
//   - HTTPClient(price.Transport(nil, prices)) books each answer's token
//     usage, priced by a price.Table, as the call's cost.
//
// The agent ID is Options.AgentID, one per wrapped model, unless the
// call's context names another (WithAgentID): give each step of a chain
// its own ID when its calls differ. The context's ID holds for the calls
// made with it, not for those nested in them (a tool's).
package langchaingo

import (
	"context"
	"errors"
	"slices"
	"sync"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
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
// booked under, instead of Options.AgentID: a chain step's own ID. It
// names the step for the model calls made with ctx, not for the calls
// nested in them: the adapter drops it from the context it hands down
// from inside a call (to the inner model, and so to the streaming
// functions) and to a tool it runs (Tool.Call), so that a wrapped model a
// tool calls is booked under its own Options.AgentID, under its own
// config. WithAgentID(ctx, "") gives Options.AgentID back.
func WithAgentID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, agentKey{}, id)
}

// withoutAgentID returns ctx without the agent ID of WithAgentID, for
// what runs inside a call or a tool: a model called there is booked
// under its own Options.AgentID.
func withoutAgentID(ctx context.Context) context.Context {
	if id, _ := ctx.Value(agentKey{}).(string); id == "" {
		return ctx
	}
	return context.WithValue(ctx, agentKey{}, "")
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
	ctx = withoutAgentID(ctx)
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
// caller's), with the first streamed chunk reported to the loop
// (stream.FirstToken), and the error mapped as an *Error when the
// transport of HTTPClient saw an HTTP error. A streamed attempt
// (llms.WithStreamingFunc or WithStreamingReasoningFunc) ends as the SDK
// adapters' Stream helpers end (stream.End); through HTTPClient, one the
// server closed without "data: [DONE]" fails with stream.ErrTruncated,
// and one that carried an error event fails with the provider's error
// (an *Error of Status 200), both retried by their class. An error of
// the caller's streaming function is returned as it is. An attempt cut
// by its context (the caller's deadline or cancel, the config's
// Timeout), streamed or not, returns langchaingo's error joined with the
// context's cause: errors.Is(err, context.DeadlineExceeded) holds for a
// deadline, where langchaingo's own "request timeout: API call exceeded
// deadline" does not. Generate is what Model runs in the loop's fn; use
// it in a fn of your own.
func Generate(ctx context.Context, inner llms.Model, model string, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var co llms.CallOptions
	for _, o := range options {
		o(&co)
	}
	opts := slices.Clip(options)
	if model != "" {
		opts = append(opts, llms.WithModel(model))
	}
	c := &oaicompat.Capture{Stream: co.StreamingFunc != nil || co.StreamingReasoningFunc != nil}
	if !c.Stream {
		resp, err := inner.GenerateContent(c.Context(ctx), messages, opts...)
		if err != nil {
			if err = c.Wrap("langchaingo", err); ctx.Err() != nil {
				// langchaingo's OpenAI client flattens the context's
				// error ("request timeout: API call exceeded deadline"):
				// the context's cause is joined to it, as for a stream.
				err = stream.End(ctx, err, false)
			}
			return nil, err
		}
		return resp, nil
	}
	cb := &callbacks{ctx: ctx, f: co.StreamingFunc, rf: co.StreamingReasoningFunc}
	if cb.f != nil {
		opts = append(opts, llms.WithStreamingFunc(cb.chunk))
	}
	if cb.rf != nil {
		opts = append(opts, llms.WithStreamingReasoningFunc(cb.reasoning))
	}
	resp, err := inner.GenerateContent(c.Context(ctx), messages, opts...)
	if err = end(ctx, c, cb, err); err != nil {
		return nil, err
	}
	return resp, nil
}

// end returns the error of a streamed attempt that ended with err.
func end(ctx context.Context, c *oaicompat.Capture, cb *callbacks, err error) error {
	if cerr := cb.failed(); cerr != nil && errors.Is(err, cerr) {
		return err // the caller stopped the stream
	}
	w := c.Watched()
	if w == nil { // no HTTPClient, or an HTTP error
		err = c.Wrap("langchaingo", err)
		if err != nil && ctx.Err() != nil {
			err = stream.End(ctx, err, false)
		}
		return err
	}
	final, event := w.Result()
	if event != nil {
		return eventError(event)
	}
	if err == nil && !final && ctx.Err() != nil {
		// langchaingo's OpenAI client returns what it has, without an
		// error, when the context ends as it reads the stream.
		err = ctx.Err()
	}
	return stream.End(ctx, err, final)
}

// callbacks are the caller's streaming functions, wrapped to report the
// first chunk to the loop and note the error they return.
type callbacks struct {
	ctx   context.Context // the attempt's
	f     func(context.Context, []byte) error
	rf    func(context.Context, []byte, []byte) error
	first sync.Once
	mu    sync.Mutex
	err   error
}

func (cb *callbacks) chunk(ctx context.Context, chunk []byte) error {
	if len(chunk) > 0 {
		cb.first.Do(func() { stream.FirstToken(cb.ctx) })
	}
	stream.Chunk(cb.ctx) // the idle limit counts from here
	return cb.note(cb.f(ctx, chunk))
}

func (cb *callbacks) reasoning(ctx context.Context, reasoningChunk, chunk []byte) error {
	if len(reasoningChunk) > 0 || len(chunk) > 0 {
		cb.first.Do(func() { stream.FirstToken(cb.ctx) })
	}
	stream.Chunk(cb.ctx)
	return cb.note(cb.rf(ctx, reasoningChunk, chunk))
}

// note keeps the first error a streaming function returned.
func (cb *callbacks) note(err error) error {
	if err != nil {
		cb.mu.Lock()
		if cb.err == nil {
			cb.err = err
		}
		cb.mu.Unlock()
	}
	return err
}

func (cb *callbacks) failed() error {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.err
}
