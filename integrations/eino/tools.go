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
// Eino returns it.
func ToolMiddleware(loop *si.Loop, prefix string) compose.ToolMiddleware {
	return compose.ToolMiddleware{
		Invokable: func(next compose.InvokableToolEndpoint) compose.InvokableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.ToolOutput, error) {
				out, _, err := si.Execute(ctx, loop, prefix+in.Name, func(ctx context.Context, _ si.Config) (*compose.ToolOutput, error) {
					return next(ctx, in)
				})
				return out, err
			}
		},
		Streamable: func(next compose.StreamableToolEndpoint) compose.StreamableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.StreamToolOutput, error) {
				out, _, err := si.Execute(ctx, loop, prefix+in.Name, func(context.Context, si.Config) (*compose.StreamToolOutput, error) {
					// The caller's context, not the attempt's: the stream
					// is read after the attempt returned, when the
					// attempt's deadline has been cancelled.
					return next(ctx, in)
				})
				return out, err
			}
		},
	}
}
