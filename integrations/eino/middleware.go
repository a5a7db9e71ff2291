package eino

import (
	"context"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
)

// Middleware is an adk.ChatModelAgentMiddleware (Eino's hook for a
// ChatModelAgent since v0.8), given in ChatModelAgentConfig.Handlers. Its
// WrapModel runs each model call of the agent (Generate and Stream)
// through the loop as Model does, under Options. With Options.ToolPrefix
// set, its tool hooks (WrapInvokableToolCall, WrapStreamableToolCall and
// their Enhanced forms) run each tool call through the loop as the agent
// ToolPrefix+name, as ToolMiddleware does; without it, they pass through
// (but for the agent ID of WithAgentID, which a tool's context never
// carries). Its other hooks pass through
// (adk.BaseChatModelAgentMiddleware).
//
// The agent ID is Options.AgentID (give each agent its own middleware,
// under the agent's Name), unless the call's context names another
// (WithAgentID), which holds for the calls made with that context, not
// for those nested in them (a tool's). Eino's callbacks see each attempt (the model's own
// callbacks run inside the wrapper); the agent's events see only the
// answer of the attempt that succeeded, as Eino sends them outside the
// handlers.
type Middleware struct {
	*adk.BaseChatModelAgentMiddleware
	loop *si.Loop
	o    Options
}

var _ adk.ChatModelAgentMiddleware = (*Middleware)(nil)

// NewMiddleware returns the Middleware that runs an agent's calls
// through loop.
func NewMiddleware(loop *si.Loop, o Options) (*Middleware, error) {
	if o.AgentID == "" {
		return nil, ErrNoAgentID
	}
	return &Middleware{BaseChatModelAgentMiddleware: &adk.BaseChatModelAgentMiddleware{}, loop: loop, o: o}, nil
}

// WrapModel returns m with each Generate and Stream run through the loop,
// under the agent's config (its Route given to m with model.WithModel).
func (h *Middleware) WrapModel(_ context.Context, m model.BaseChatModel, _ *adk.ModelContext) (model.BaseChatModel, error) {
	return &Model{loop: h.loop, inner: m, o: h.o, callbacks: true}, nil
}

// WrapInvokableToolCall returns next with each call run through the loop
// as the agent Options.ToolPrefix followed by the tool's name, retried
// under that agent's config (the tool sees its Timeout in its context);
// with Options.ToolPrefix "", next as it is. Either way the tool's
// context has no agent ID of WithAgentID: a wrapped model the tool calls
// is booked under its own Options.AgentID.
func (h *Middleware) WrapInvokableToolCall(_ context.Context, next adk.InvokableToolCallEndpoint, tc *adk.ToolContext) (adk.InvokableToolCallEndpoint, error) {
	if h.o.ToolPrefix == "" {
		return func(ctx context.Context, args string, opts ...tool.Option) (string, error) {
			return next(withoutAgentID(ctx), args, opts...)
		}, nil
	}
	return func(ctx context.Context, args string, opts ...tool.Option) (string, error) {
		return runTool(ctx, h.loop, h.o.ToolPrefix+tc.Name, func(ctx context.Context) (string, error) {
			return next(ctx, args, opts...)
		})
	}, nil
}

// WrapStreamableToolCall is WrapInvokableToolCall for a streamed tool
// call: it runs through the loop until its stream is returned, under the
// caller's context (the config's Timeout would cancel the stream before
// it is read), as ToolMiddleware does.
func (h *Middleware) WrapStreamableToolCall(_ context.Context, next adk.StreamableToolCallEndpoint, tc *adk.ToolContext) (adk.StreamableToolCallEndpoint, error) {
	if h.o.ToolPrefix == "" {
		return func(ctx context.Context, args string, opts ...tool.Option) (*schema.StreamReader[string], error) {
			return next(withoutAgentID(ctx), args, opts...)
		}, nil
	}
	return func(ctx context.Context, args string, opts ...tool.Option) (*schema.StreamReader[string], error) {
		ctx = withoutAgentID(ctx)
		return runTool(ctx, h.loop, h.o.ToolPrefix+tc.Name, func(context.Context) (*schema.StreamReader[string], error) {
			return next(ctx, args, opts...)
		})
	}, nil
}

// WrapEnhancedInvokableToolCall is WrapInvokableToolCall for an enhanced
// tool (multimodal arguments and results).
func (h *Middleware) WrapEnhancedInvokableToolCall(_ context.Context, next adk.EnhancedInvokableToolCallEndpoint, tc *adk.ToolContext) (adk.EnhancedInvokableToolCallEndpoint, error) {
	if h.o.ToolPrefix == "" {
		return func(ctx context.Context, arg *schema.ToolArgument, opts ...tool.Option) (*schema.ToolResult, error) {
			return next(withoutAgentID(ctx), arg, opts...)
		}, nil
	}
	return func(ctx context.Context, arg *schema.ToolArgument, opts ...tool.Option) (*schema.ToolResult, error) {
		return runTool(ctx, h.loop, h.o.ToolPrefix+tc.Name, func(ctx context.Context) (*schema.ToolResult, error) {
			return next(ctx, arg, opts...)
		})
	}, nil
}

// WrapEnhancedStreamableToolCall is WrapStreamableToolCall for an
// enhanced tool.
func (h *Middleware) WrapEnhancedStreamableToolCall(_ context.Context, next adk.EnhancedStreamableToolCallEndpoint, tc *adk.ToolContext) (adk.EnhancedStreamableToolCallEndpoint, error) {
	if h.o.ToolPrefix == "" {
		return func(ctx context.Context, arg *schema.ToolArgument, opts ...tool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
			return next(withoutAgentID(ctx), arg, opts...)
		}, nil
	}
	return func(ctx context.Context, arg *schema.ToolArgument, opts ...tool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
		ctx = withoutAgentID(ctx)
		return runTool(ctx, h.loop, h.o.ToolPrefix+tc.Name, func(context.Context) (*schema.StreamReader[*schema.ToolResult], error) {
			return next(ctx, arg, opts...)
		})
	}, nil
}
