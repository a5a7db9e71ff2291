// Package genkit runs Genkit Go (github.com/firebase/genkit/go) model
// calls under the selfimprove loop. Middleware returns an ai.Middleware
// (Genkit's middleware interface since v1.7), given to genkit.Generate
// (or a prompt) with ai.WithUse: its WrapModel hook runs each call of the
// model, each turn of a tool loop included, through
// Loop.ExecuteWithImprovement, under the agent's config:
//
//   - Config.Route picks the model, through Options.Routes (the route
//     ladder): a route that names a model calls that model of
//     Options.Genkit's registry (genkit.LookupModel) with the request;
//   - Config.Timeout, MaxAttempts and Backoff are enforced by the loop:
//     give the OpenAI-compatible plugin ClientOptions, which turn
//     openai-go's own retries off;
//   - the provider's errors are mapped (Wrap) so that the loop sees the
//     status, the error code and the Retry-After headers;
//   - a streamed call reports its first chunk to the loop
//     (stream.FirstToken), so Config.FirstTokenTimeout bounds the wait for
//     it; through ClientOptions, a stream that ends without "data: [DONE]"
//     is a failure, retried;
//   - Options.Check fails an answer the caller cannot use as a bad output
//     (failure.BadOutput), which the loop retries;
//   - with Options.ToolPrefix, its WrapTool hook runs each tool call
//     through the loop too, as an agent of its own per tool;
//   - ClientOptions(price.Transport(nil, prices)) books each answer's
//     token usage, priced by a price.Table, as the call's cost (a stream's
//     once its request asks for it: see ClientOptions).
//
// The agent ID is Options.AgentID, one per middleware (make one per
// agent or flow), unless the call's context names another (WithAgentID),
// which holds for the calls made with that context, not for those nested
// in them (a tool's).
//
// Genkit deprecates ai.ModelMiddleware (ai.WithMiddleware) for
// ai.Middleware; the adapter offers only the latter.
package genkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Options configures Middleware.
type Options struct {
	// AgentID is the agent the calls are booked under, unless a call's
	// context names another (WithAgentID). Required.
	AgentID string
	// Routes maps the agent's Config.Route to the model to call
	// (Routes.Model), by its Genkit name ("openai/gpt-4o"). Default zero:
	// Config.Route itself is the model when set; with no route, the call
	// keeps the model the caller chose. Give the loop the same ladder
	// (selfimprove.WithRoutes or Loop.SetRoutes) for it to move the agent
	// down it and back.
	Routes si.Routes
	// Genkit is the registry the models of the routes are looked up in.
	// Required when a route names a model.
	Genkit *genkit.Genkit
	// Check, when not nil, checks each answer: an error fails the
	// attempt as a bad output (failure.BadOutput), which the loop
	// retries at once. Default nil: every answer is taken.
	Check func(*ai.ModelResponse) error
	// ToolPrefix, when set, runs each tool call of the Generate calls the
	// middleware is given to through the loop, as the agent ToolPrefix
	// followed by the tool's name ("tool:" and "search" give
	// "tool:search"): each tool has its own stats, threshold and config,
	// a failed call is retried under that config and recorded. Default
	// "": tool calls are not run through the loop.
	ToolPrefix string
}

// ErrNoAgentID is returned by Middleware for Options without an AgentID.
var ErrNoAgentID = errors.New("genkit adapter: Options.AgentID is required")

// ErrNoModel is the error of a call whose route names a model that
// Options.Genkit does not have (or Options.Genkit nil).
var ErrNoModel = errors.New("genkit adapter: no such model")

type agentKey struct{}

// WithAgentID returns ctx with the agent ID the calls made with it are
// booked under, instead of Options.AgentID: a flow step's own ID. It
// names the step for the model calls of the Generate calls made with
// ctx, not for the calls nested in them: the middleware drops it from
// the context it hands down from inside a model call and to each tool
// (its WrapTool hook, with or without Options.ToolPrefix; WrapTool), so
// that a model a tool calls through another middleware is booked under
// that middleware's Options.AgentID, under its config.
// WithAgentID(ctx, "") gives Options.AgentID back.
func WithAgentID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, agentKey{}, id)
}

// withoutAgentID returns ctx without the agent ID of WithAgentID, for
// what runs inside a call or a tool: a model called there is booked
// under its own middleware's Options.AgentID.
func withoutAgentID(ctx context.Context) context.Context {
	if id, _ := ctx.Value(agentKey{}).(string); id == "" {
		return ctx
	}
	return context.WithValue(ctx, agentKey{}, "")
}

// Name is the name the middleware of Middleware gives Genkit
// (ai.Middleware's Name).
const Name = "selfimprove/loop"

// Middleware returns the ai.Middleware, given to genkit.Generate (or a
// prompt) with ai.WithUse, whose WrapModel hook runs each model call
// through loop, and whose WrapTool hook runs each tool call through it
// when Options.ToolPrefix is set (and, either way, without the agent ID
// of WithAgentID in the tool's context). Put it last in ai.WithUse: a route that
// names another model calls that model directly, not the middleware
// after it. A streamed call hands the callback each attempt's chunks: a
// retried attempt streams again from the start.
func Middleware(loop *si.Loop, o Options) (ai.Middleware, error) {
	if o.AgentID == "" {
		return nil, ErrNoAgentID
	}
	return &middleware{loop: loop, o: o}, nil
}

// middleware is the ai.Middleware of Middleware.
type middleware struct {
	loop *si.Loop
	o    Options
}

// Name returns Name.
func (*middleware) Name() string { return Name }

// New returns the hooks of one Generate call: WrapModel and WrapTool.
func (m *middleware) New(context.Context) (*ai.Hooks, error) {
	return &ai.Hooks{WrapModel: m.wrapModel, WrapTool: m.wrapTool}, nil
}

// wrapModel runs the model call of p through the loop.
func (m *middleware) wrapModel(ctx context.Context, p *ai.ModelParams, next ai.ModelNext) (*ai.ModelResponse, error) {
	id, _ := ctx.Value(agentKey{}).(string)
	if id == "" {
		id = m.o.AgentID
	}
	ctx = withoutAgentID(ctx)
	fn := func(ctx context.Context, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
		return next(ctx, &ai.ModelParams{Request: req, Callback: cb})
	}
	var out *ai.ModelResponse
	_, err := m.loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
		resp, err := m.o.attempt(ctx, fn, cfg, p.Request, p.Callback)
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

// wrapTool runs the tool call of p, without the agent ID of WithAgentID
// in its context, through the loop as the agent Options.ToolPrefix
// followed by the tool's name; as it is with Options.ToolPrefix "". A
// tool's interrupt (ai.IsToolInterruptError) is no failure of the tool:
// it is booked as a success and returned as it is, not retried.
func (m *middleware) wrapTool(ctx context.Context, p *ai.ToolParams, next ai.ToolNext) (*ai.MultipartToolResponse, error) {
	ctx = withoutAgentID(ctx)
	if m.o.ToolPrefix == "" {
		return next(ctx, p)
	}
	var interrupt error
	out, _, err := si.Execute(ctx, m.loop, m.o.ToolPrefix+p.Tool.Name(), func(ctx context.Context, _ si.Config) (*ai.MultipartToolResponse, error) {
		resp, err := next(ctx, p)
		if ok, _ := ai.IsToolInterruptError(err); ok {
			interrupt = err
			return resp, nil
		}
		return resp, err
	})
	if interrupt != nil {
		return out, interrupt
	}
	return out, err
}

// attempt makes one call: on the model the config's route names, else
// next.
func (o Options) attempt(ctx context.Context, next ai.ModelFunc, cfg si.Config, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
	name := cfg.Route
	if o.Routes.Primary != "" || len(o.Routes.Models) > 0 {
		name = o.Routes.Model(cfg)
	}
	fn := next
	if name != "" {
		var m ai.Model
		if o.Genkit != nil {
			m = genkit.LookupModel(o.Genkit, name)
		}
		if m == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoModel, name)
		}
		fn = m.Generate
	}
	return Generate(ctx, fn, req, cb)
}

// Generate makes one attempt with fn (a model's Generate, or the next
// ai.ModelFunc): it reports the first streamed chunk that carries content
// to the loop, maps the error (Wrap) and, for a stream read through a
// client made with ClientOptions, fails one that ended without
// "data: [DONE]" (stream.ErrTruncated) and maps its end as the SDK
// adapters do (stream.End). It is what Middleware runs in the loop's fn;
// use it in a fn of your own.
func Generate(ctx context.Context, fn ai.ModelFunc, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
	if cb == nil {
		resp, err := fn(ctx, req, nil)
		return resp, Wrap(err)
	}
	w := &oaicompat.Capture{Stream: true}
	first := false
	var cbErr error // the first error of the caller's callback
	resp, err := fn(w.Context(ctx), req, func(ctx2 context.Context, c *ai.ModelResponseChunk) error {
		if !first && len(c.Content) > 0 {
			first = true
			stream.FirstToken(ctx)
		}
		stream.Chunk(ctx) // the idle limit counts from here
		err := cb(ctx2, c)
		if err != nil && cbErr == nil {
			cbErr = err
		}
		return err
	})
	if cbErr != nil && errors.Is(err, cbErr) {
		return nil, err // the caller stopped the stream: its error, as it is
	}
	err = Wrap(err)
	body := w.Watched()
	if body == nil {
		if err != nil && ctx.Err() != nil {
			err = stream.End(ctx, err, false)
		}
		return answered(resp, err)
	}
	if err = stream.End(ctx, err, body.Final()); err != nil {
		return nil, err
	}
	return answered(resp, nil)
}

// errNoResponse is Generate's error when the model returned neither a
// response nor an error (Genkit would dereference the response).
var errNoResponse = errors.New("genkit adapter: the model returned no response")

// answered is resp and err, or errNoResponse when both are nil.
func answered(resp *ai.ModelResponse, err error) (*ai.ModelResponse, error) {
	if resp == nil && err == nil {
		return nil, errNoResponse
	}
	return resp, err
}
