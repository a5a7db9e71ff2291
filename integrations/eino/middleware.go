package eino

import (
	"context"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	si "github.com/self-improving-loop/selfimprove"
)

// Middleware is an adk.ChatModelAgentMiddleware (Eino's hook for a
// ChatModelAgent since v0.8), given in ChatModelAgentConfig.Handlers. Its
// WrapModel runs each model call of the agent (Generate and Stream)
// through the loop as Model does, under Options. Its other hooks pass
// through (adk.BaseChatModelAgentMiddleware): for tool calls, give
// ToolMiddleware to ChatModelAgentConfig.Middlewares (WrapToolCall).
//
// The agent ID is Options.AgentID (give each agent its own middleware,
// under the agent's Name), unless the call's context names another
// (WithAgentID). Eino's callbacks see each attempt (the model's own
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
