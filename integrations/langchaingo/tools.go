package langchaingo

import (
	"context"

	si "github.com/self-improving-loop/selfimprove"
)

// ToolCaller is langchaingo's tools.Tool, named here so that this module
// does not import langchaingo's tools package (its calculator brings a
// Starlark interpreter): every tools.Tool is one, and so is *Tool.
type ToolCaller interface {
	Name() string
	Description() string
	Call(ctx context.Context, input string) (string, error)
}

// Tool is a langchaingo tools.Tool (a ToolCaller) whose calls run through the loop, as
// the agent prefix+Name() ("tool:" and "search" give "tool:search"): each
// tool has its own stats, threshold and config, a failed call is retried
// under the tool's config (its transient floor included) and recorded, and
// the tool sees the config's Timeout in its context. Make one with
// WrapTool and give it to an agent (agents.NewOneShotAgent and the like)
// in place of the tool.
type Tool struct {
	ToolCaller
	loop   *si.Loop
	prefix string
}

// WrapTool returns t with its calls run through loop as the agent
// prefix+t.Name().
func WrapTool(loop *si.Loop, prefix string, t ToolCaller) *Tool {
	return &Tool{ToolCaller: t, loop: loop, prefix: prefix}
}

// Call runs the tool's Call through the loop, without the agent ID of
// WithAgentID in its context (a wrapped model the tool calls is booked
// under its own Options.AgentID), and returns its last attempt's answer
// and error.
func (t *Tool) Call(ctx context.Context, input string) (string, error) {
	out, _, err := si.Execute(withoutAgentID(ctx), t.loop, t.prefix+t.Name(), func(ctx context.Context, _ si.Config) (string, error) {
		return t.ToolCaller.Call(ctx, input)
	})
	return out, err
}
