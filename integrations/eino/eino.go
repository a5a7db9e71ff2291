// Package eino runs Eino (github.com/cloudwego/eino) model calls under
// the selfimprove loop. New wraps a model.ToolCallingChatModel (the
// model an adk.ChatModelAgent, a react agent or a compose graph calls):
// each Generate and Stream runs through Loop.ExecuteWithImprovement,
// under the agent's config:
//
//   - Config.Route picks the model, through Options.Routes (the route
//     ladder), given to the inner model with model.WithModel;
//   - Config.Timeout, MaxAttempts and Backoff are enforced by the loop:
//     leave Eino's own retries off (ChatModelAgentConfig.ModelRetryConfig
//     nil, its default);
//   - HTTPClient keeps what Eino's OpenAI model drops (the status, the
//     provider's error code and the Retry-After headers), so that the loop
//     classifies and paces each failure as for the SDK adapters;
//   - a streamed call reports its first chunk to the loop
//     (stream.FirstToken), so Config.FirstTokenTimeout bounds the wait for
//     it, and a stream that ends without its final event is a failure,
//     retried;
//   - Options.Check fails an answer the caller cannot use as a bad output
//     (failure.BadOutput), which the loop retries;
//   - HTTPClient(price.Transport(nil, prices)) books each answer's token
//     usage, priced by a price.Table, as the call's cost.
//
// The agent ID is Options.AgentID, one per wrapped model (wrap the model
// once per agent, under the agent's Name), unless the call's context
// names another (WithAgentID), which holds for the calls made with that
// context, not for those nested in them (a tool's).
//
// Eino runs its callbacks around the wrapper, not around each attempt
// (see Model.IsCallbacksEnabled).
//
// Eino's hook for a ChatModelAgent's model calls (since v0.8) is
// adk.ChatModelAgentMiddleware's WrapModel: NewMiddleware returns one,
// for ChatModelAgentConfig.Handlers. New (the wrapped model) serves a
// react agent, a compose graph or a ChatModelAgent alike.
package eino

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/cloudwego/eino/callbacks"
	"github.com/cloudwego/eino/components"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Options configures New.
type Options struct {
	// AgentID is the agent the calls are booked under, unless a call's
	// context names another (WithAgentID). Required.
	AgentID string
	// Routes maps the agent's Config.Route to the model to call
	// (Routes.Model). Default zero: Config.Route itself is the model
	// when set; with no route, the call keeps the inner model's own.
	// Give the loop the same ladder (selfimprove.WithRoutes or
	// Loop.SetRoutes) for it to move the agent down it and back.
	Routes si.Routes
	// Check, when not nil, checks each answer (a streamed one once it
	// has ended, its chunks concatenated): an error fails the attempt as
	// a bad output (failure.BadOutput), which the loop retries at once.
	// Default nil: every answer is taken.
	Check func(*schema.Message) error
	// ToolPrefix, when set, makes the Middleware of NewMiddleware run
	// each tool call of the agent through the loop (its
	// WrapInvokableToolCall and WrapStreamableToolCall hooks, and their
	// Enhanced forms), as the agent ToolPrefix followed by the tool's
	// name ("tool:" and "search" give "tool:search"): each tool has its
	// own stats, threshold and config, a failed call is retried under
	// that config and recorded. Default "": tool calls run as Eino calls
	// them. New ignores it (use ToolMiddleware).
	ToolPrefix string
	// Incremental makes Model.Stream return its reader at once and pass
	// it each chunk as it arrives, so that a chat UI sees the first token
	// as early as without the loop. When an attempt fails after some of
	// its chunks were passed on and the loop starts over (a retry, a
	// fallback, an answer Check refuses), the reader returns
	// ErrStartOver: the chunks received before it are void, and the next
	// attempt's follow. A call that fails in the end returns its error
	// last; a failure is never an answer cut short. Closing the reader
	// cancels the call at once, even while the stream stalls or the loop
	// waits before a retry (the reader's Close, made by the goroutine
	// that reads it). Default false: the reader holds the chunks of the
	// attempt that succeeded, once it has ended, as Eino's own
	// ModelRetryConfig does.
	Incremental bool
}

// ErrStartOver is returned by the reader of an Incremental Model.Stream
// when the loop starts the answer over: the chunks received before it
// belong to an attempt that failed, and are void. Keep reading: the next
// attempt's chunks follow.
var ErrStartOver = errors.New("eino adapter: the attempt failed; the answer starts over")

// Model is a model.ToolCallingChatModel whose calls run under the
// selfimprove loop.
type Model struct {
	loop  *si.Loop
	inner model.BaseChatModel
	// bound is inner with WithTools, nil for the model of
	// Middleware.WrapModel.
	bound model.ToolCallingChatModel
	o     Options
	// callbacks keeps the call's callback handlers for inner's attempts
	// (Middleware.WrapModel).
	callbacks bool
}

var _ model.ToolCallingChatModel = (*Model)(nil)

// ErrNoAgentID is returned by New for Options without an AgentID.
var ErrNoAgentID = errors.New("eino adapter: Options.AgentID is required")

// New returns inner wrapped so that each call runs through loop. Give
// inner's config the HTTP client of HTTPClient (openai.ChatModelConfig's
// HTTPClient) for the loop to see the provider's status, code and
// Retry-After.
func New(loop *si.Loop, inner model.ToolCallingChatModel, o Options) (*Model, error) {
	if o.AgentID == "" {
		return nil, ErrNoAgentID
	}
	return &Model{loop: loop, inner: inner, bound: inner, o: o}, nil
}

type agentKey struct{}

// WithAgentID returns ctx with the agent ID the calls made with it are
// booked under, instead of Options.AgentID: a graph node's own ID. It
// names the step for the model calls made with ctx, not for the calls
// nested in them: the adapter drops it from the context it hands down
// from inside a call (the inner model's) and to a tool it runs
// (ToolMiddleware, Middleware's tool hooks, WrapTool), so that a wrapped
// model a tool calls is booked under its own Options.AgentID, under its
// own config. WithAgentID(ctx, "") gives Options.AgentID back.
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

// start returns the agent ID of the call and ctx without it (see
// WithAgentID) and without the call's callback handlers, for the inner
// model's attempts.
func (m *Model) start(ctx context.Context) (context.Context, string) {
	id, _ := ctx.Value(agentKey{}).(string)
	if id == "" {
		id = m.o.AgentID
	}
	ctx = withoutAgentID(ctx)
	if m.callbacks {
		return ctx, id
	}
	return callbacks.InitCallbacks(ctx, nil), id
}

// route is the model the config names, or "" for the inner model's own.
func (m *Model) route(cfg si.Config) string {
	if m.o.Routes.Primary != "" || len(m.o.Routes.Models) > 0 {
		return m.o.Routes.Model(cfg)
	}
	return cfg.Route
}

// check fails msg as a bad output when Options.Check refuses it.
func (m *Model) check(msg *schema.Message) error {
	if m.o.Check == nil {
		return nil
	}
	if err := m.o.Check(msg); err != nil {
		return failure.BadOutput(err)
	}
	return nil
}

// Generate runs inner's Generate through the loop under the agent's
// config, and returns the answer of the attempt that succeeded, or the
// last attempt's error (an *Error for a provider's error).
func (m *Model) Generate(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	var out *schema.Message
	ctx, id := m.start(ctx)
	_, err := m.loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
		msg, err := Generate(ctx, m.inner, m.route(cfg), input, opts...)
		if err == nil {
			err = m.check(msg)
		}
		if err == nil {
			out = msg
		}
		return err
	})
	return out, err
}

// Stream runs inner's Stream through the loop under the agent's config.
// Each attempt reads its stream to the end (see the function Stream): a
// stream that fails mid-way, stalls before its first chunk or ends
// without its final event is retried from the start, and the reader
// returned holds the chunks of the attempt that succeeded, as Eino's own
// ModelRetryConfig does for a stream. The error is the last attempt's.
func (m *Model) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if m.o.Incremental {
		return m.streamIncremental(ctx, input, opts...), nil
	}
	var out []*schema.Message
	ctx, id := m.start(ctx)
	_, err := m.loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
		chunks, err := Stream(ctx, m.inner, m.route(cfg), input, nil, opts...)
		if err == nil && m.o.Check != nil {
			msg, cerr := schema.ConcatMessages(chunks)
			if err = cerr; err == nil {
				err = m.check(msg)
			}
		}
		if err == nil {
			out = chunks
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray(out), nil
}

// WithTools returns the inner model with tools bound (its WithTools),
// wrapped as m is.
func (m *Model) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	if m.bound == nil {
		return nil, ErrNoTools
	}
	inner, err := m.bound.WithTools(tools)
	if err != nil {
		return nil, err
	}
	return &Model{loop: m.loop, inner: inner, bound: inner, o: m.o, callbacks: m.callbacks}, nil
}

// ErrNoTools is the error of WithTools on the model of
// Middleware.WrapModel, to which Eino binds no tools (it binds them to
// the agent's model).
var ErrNoTools = errors.New("eino adapter: the model of Middleware.WrapModel binds no tools")

// IsCallbacksEnabled returns false: Eino runs its callbacks around the
// wrapper (in a graph or agent), so that they see each call once, with
// the answer or error of the loop's last attempt. The inner model's
// attempts run without the call's handlers (Eino's global handlers, if
// any, still see each attempt): an agent, which reads its answer from
// the callbacks, never sees an attempt the loop retried.
func (m *Model) IsCallbacksEnabled() bool { return false }

// GetType returns the inner model's type ("OpenAI"), for Eino's
// callbacks and traces.
func (m *Model) GetType() string {
	t, _ := components.GetType(m.inner)
	return t
}

// withModel returns opts with model.WithModel(name) last, when name is
// set.
func withModel(opts []model.Option, name string) []model.Option {
	if name == "" {
		return opts
	}
	return append(slices.Clip(opts), model.WithModel(name))
}

// Generate makes one attempt: inner's Generate on model (none: the inner
// model's own), with the error mapped as an *Error for a provider's
// error. It is what Model runs in the loop's fn; use it in a fn of your
// own.
func Generate(ctx context.Context, inner model.BaseChatModel, modelName string, input []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	c := &oaicompat.Capture{}
	msg, err := inner.Generate(c.Context(ctx), input, withModel(opts, modelName)...)
	if err != nil {
		return nil, wrap(c, err)
	}
	return msg, nil
}

// Stream makes one streamed attempt: inner's Stream on model (none: the
// inner model's own), read to its end. It calls onChunk, when not nil,
// with each chunk as it arrives, reports the first chunk that carries
// content, reasoning or a tool call to the loop (stream.FirstToken), and
// returns the chunks with the error the loop should see, as
// integrations/openai's Stream does (docs/llm.md#streaming):
//
//   - nil for a stream that ended with "data: [DONE]" (seen by the
//     transport of HTTPClient; with another client, the end of the
//     stream counts as its final event);
//   - stream.ErrTruncated for one the server closed without it;
//   - an *Error for an HTTP error, and for an error event inside the 200
//     stream (its Status is 200);
//   - the error with the context's cause for a stream cut by its context
//     (failure.ErrFirstTokenTimeout for a stall before the first token);
//   - otherwise, for a stream that broke mid-way, the error wrapped with
//     stream.ErrInterrupted.
func Stream(ctx context.Context, inner model.BaseChatModel, modelName string, input []*schema.Message, onChunk func(*schema.Message), opts ...model.Option) ([]*schema.Message, error) {
	c := &oaicompat.Capture{Stream: true}
	sr, err := inner.Stream(c.Context(ctx), input, withModel(opts, modelName)...)
	if err != nil {
		if err = wrap(c, err); ctx.Err() != nil {
			return nil, stream.End(ctx, err, false)
		}
		return nil, err
	}
	defer sr.Close()
	var chunks []*schema.Message
	first := false
	for {
		msg, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, stream.End(ctx, nil, c.Watched().Final())
		}
		if err != nil {
			return chunks, stream.End(ctx, wrap(c, err), false)
		}
		if !first && hasToken(msg) {
			first = true
			stream.FirstToken(ctx)
		}
		stream.Chunk(ctx) // the idle limit counts from here
		chunks = append(chunks, msg)
		if onChunk != nil {
			onChunk(msg)
		}
	}
}

// hasToken reports whether msg carries a piece of the answer.
func hasToken(msg *schema.Message) bool {
	return msg != nil && (msg.Content != "" || msg.ReasoningContent != "" || len(msg.ToolCalls) > 0 || len(msg.AssistantGenMultiContent) > 0)
}
