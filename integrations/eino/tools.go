package eino

import (
	"context"

	"github.com/cloudwego/eino/components"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
)

// ToolMiddleware returns the middleware that runs each tool call through
// loop, for adk.ChatModelAgentConfig's Middlewares (AgentMiddleware's
// WrapToolCall) or compose.ToolsNodeConfig's ToolCallMiddlewares. The
// agent ID of a call is prefix followed by the tool's name ("tool:" and
// "search" give "tool:search"), for Eino's invokable and streamable
// tools and their enhanced forms alike, so that each tool has its own stats,
// threshold and config; the loop retries a failed call under the tool's
// config (its transient floor included) and records each failure. The
// tool sees the config's Timeout in its context. A streamed tool call is
// run through the loop until its stream is returned, under the caller's
// context (the config's Timeout would cancel the stream before it is
// read): what fails while the stream is read is the tool's reader's, as
// Eino returns it. The tool's context has no agent ID of WithAgentID: a
// wrapped model the tool calls is booked under its own Options.AgentID.
func ToolMiddleware(loop *si.Loop, prefix string) compose.ToolMiddleware {
	return compose.ToolMiddleware{
		Invokable:          invokeHook[compose.InvokableToolEndpoint](loop, prefix),
		Streamable:         streamHook[compose.StreamableToolEndpoint](loop, prefix),
		EnhancedInvokable:  invokeHook[compose.EnhancedInvokableToolEndpoint](loop, prefix),
		EnhancedStreamable: streamHook[compose.EnhancedStreamableToolEndpoint](loop, prefix),
	}
}

// invokeHook is ToolMiddleware's hook for a tool call of endpoint E.
func invokeHook[E ~func(context.Context, *compose.ToolInput) (O, error), O any](loop *si.Loop, prefix string) func(E) E {
	return func(next E) E {
		return func(ctx context.Context, in *compose.ToolInput) (O, error) {
			return runTool(ctx, loop, prefix+in.Name, func(ctx context.Context) (O, error) {
				return next(ctx, in)
			})
		}
	}
}

// streamHook is ToolMiddleware's hook for a streamed tool call of
// endpoint E.
func streamHook[E ~func(context.Context, *compose.ToolInput) (O, error), O any](loop *si.Loop, prefix string) func(E) E {
	return func(next E) E {
		return func(ctx context.Context, in *compose.ToolInput) (O, error) {
			ctx = withoutAgentID(ctx)
			return runTool(ctx, loop, prefix+in.Name, func(context.Context) (O, error) {
				// The caller's context, not the attempt's: the stream
				// is read after the attempt returned, when the
				// attempt's deadline has been cancelled.
				return next(ctx, in)
			})
		}
	}
}

// WrapTool returns t with each InvokableRun run through loop as the
// agent agentID (say "tool:" and the tool's name): the tool has its own
// stats, threshold and config, a failed call is retried under that
// config and recorded, and t sees the config's Timeout in its context,
// without the agent ID of WithAgentID (a wrapped model it calls is
// booked under its own Options.AgentID), as ToolMiddleware runs it. It is
// for a tool you call yourself (in a graph's lambda node, say), with a
// context that may name a step: give an agent or a ToolsNode the tool
// itself, under ToolMiddleware or Options.ToolPrefix, not both. The
// tool returned is an InvokableTool only, whatever else t is.
func WrapTool(loop *si.Loop, agentID string, t tool.InvokableTool) tool.InvokableTool {
	return &invokableTool{InvokableTool: t, loop: loop, id: agentID}
}

// WrapStreamableTool is WrapTool for a StreamableTool: each
// StreamableRun runs through the loop until its stream is returned,
// under the caller's context, as ToolMiddleware runs a streamed tool
// call.
func WrapStreamableTool(loop *si.Loop, agentID string, t tool.StreamableTool) tool.StreamableTool {
	return &streamableTool{StreamableTool: t, loop: loop, id: agentID}
}

type invokableTool struct {
	tool.InvokableTool
	loop *si.Loop
	id   string
}

// InvokableRun runs the tool's InvokableRun through the loop.
func (t *invokableTool) InvokableRun(ctx context.Context, args string, opts ...tool.Option) (string, error) {
	return runTool(ctx, t.loop, t.id, func(ctx context.Context) (string, error) {
		return t.InvokableTool.InvokableRun(ctx, args, opts...)
	})
}

// IsCallbacksEnabled is the tool's own.
func (t *invokableTool) IsCallbacksEnabled() bool {
	return components.IsCallbacksEnabled(t.InvokableTool)
}

type streamableTool struct {
	tool.StreamableTool
	loop *si.Loop
	id   string
}

// StreamableRun runs the tool's StreamableRun through the loop until
// its stream is returned.
func (t *streamableTool) StreamableRun(ctx context.Context, args string, opts ...tool.Option) (*schema.StreamReader[string], error) {
	ctx = withoutAgentID(ctx)
	return runTool(ctx, t.loop, t.id, func(context.Context) (*schema.StreamReader[string], error) {
		return t.StreamableTool.StreamableRun(ctx, args, opts...)
	})
}

// IsCallbacksEnabled is the tool's own.
func (t *streamableTool) IsCallbacksEnabled() bool {
	return components.IsCallbacksEnabled(t.StreamableTool)
}

// runTool runs a tool call, f, through the loop as agent id, without
// the agent ID of WithAgentID in its context: a wrapped model the tool
// calls is booked under its own. A human's turn the tool asks for
// (compose.Interrupt, Eino's human in the loop) is no failure of the
// tool: it is passed on as it is, after one run, and the call booked as
// a success; every other error is the tool's.
func runTool[T any](ctx context.Context, loop *si.Loop, id string, f func(ctx context.Context) (T, error)) (T, error) {
	ctx = withoutAgentID(ctx)
	var interrupt error
	out, _, err := si.Execute(ctx, loop, id, func(ctx context.Context, _ si.Config) (T, error) {
		v, err := f(ctx)
		if _, ok := compose.IsInterruptRerunError(err); ok {
			interrupt = err
			return v, nil
		}
		return v, err
	})
	if interrupt != nil {
		return out, interrupt
	}
	return out, err
}
