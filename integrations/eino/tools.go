package eino

import (
	"context"

	"github.com/cloudwego/eino/compose"
	si "github.com/self-improving-loop/selfimprove"
)

// ToolMiddleware returns the middleware that runs each tool call through
// loop, for adk.ChatModelAgentConfig's Middlewares (AgentMiddleware's
// WrapToolCall) or compose.ToolsNodeConfig's ToolCallMiddlewares. The
// agent ID of a call is prefix followed by the tool's name ("tool:" and
// "search" give "tool:search"), so that each tool has its own stats,
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
		Invokable: func(next compose.InvokableToolEndpoint) compose.InvokableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.ToolOutput, error) {
				return runTool(ctx, loop, prefix+in.Name, func(ctx context.Context) (*compose.ToolOutput, error) {
					return next(ctx, in)
				})
			}
		},
		Streamable: func(next compose.StreamableToolEndpoint) compose.StreamableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.StreamToolOutput, error) {
				ctx = withoutAgentID(ctx)
				return runTool(ctx, loop, prefix+in.Name, func(context.Context) (*compose.StreamToolOutput, error) {
					// The caller's context, not the attempt's: the stream
					// is read after the attempt returned, when the
					// attempt's deadline has been cancelled.
					return next(ctx, in)
				})
			}
		},
	}
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
