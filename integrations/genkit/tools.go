package genkit

import (
	"context"

	"github.com/firebase/genkit/go/ai"
	si "github.com/self-improving-loop/selfimprove"
)

// WrapTool returns fn, a tool's function, with each call run through loop
// as the agent agentID (say "tool:" and the tool's name): the tool has
// its own stats, threshold and config, a failed call is retried under
// that config (its transient floor included) and recorded, and the
// function sees the config's Timeout in its context, without the agent
// ID of WithAgentID (a model it calls is booked under its own). Within
// genkit.Generate, Options.ToolPrefix does the same for every tool
// through the middleware's WrapTool hook; WrapTool is for a tool function
// called elsewhere too: give the wrapped function to genkit.DefineTool.
//
//	genkit.DefineTool(g, "search", "searches the web", adapter.WrapTool(loop, "tool:search", search))
func WrapTool[In, Out any](loop *si.Loop, agentID string, fn ai.ToolFunc[In, Out]) ai.ToolFunc[In, Out] {
	return func(tc *ai.ToolContext, input In) (Out, error) {
		out, _, err := si.Execute(withoutAgentID(tc), loop, agentID, func(ctx context.Context, _ si.Config) (Out, error) {
			c := *tc
			c.Context = ctx
			return fn(&c, input)
		})
		return out, err
	}
}
