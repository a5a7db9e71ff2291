package langchaingo_test

import (
	"context"
	"testing"

	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/tmc/langchaingo/llms"
)

// modelTool is a langchaingo tool that asks m.
type modelTool struct{ m llms.Model }

func (*modelTool) Name() string        { return "search" }
func (*modelTool) Description() string { return "searches" }
func (mt *modelTool) Call(ctx context.Context, input string) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, mt.m, input)
}

// routerModel is a model that answers with what m answers.
type routerModel struct{ m llms.Model }

func (r *routerModel) GenerateContent(ctx context.Context, messages []llms.MessageContent, _ ...llms.CallOption) (*llms.ContentResponse, error) {
	return r.m.GenerateContent(ctx, messages)
}

func (r *routerModel) Call(ctx context.Context, prompt string, _ ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, r, prompt)
}

// TestAgentIDNotPassedToNestedCalls: WithAgentID names a chain step
// ("writer/plan") for the model calls made with its context, not for the
// calls nested in them. The step calls its model, then a tool (WrapTool)
// that asks another wrapped model, Options.AgentID "researcher"; and a
// model whose inner model asks the researcher itself (a router, say).
// The step's call is booked under "writer/plan", the researcher's two
// under "researcher". Before, the step's ID reached the nested calls,
// which were booked (and configured) as "writer/plan", and "researcher"
// got none.
func TestAgentIDNotPassedToNestedCalls(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("hi") })
	l := newLoop(t)
	writer := wrap(t, l, llm(t, s), adapter.Options{AgentID: "writer"})
	researcher := wrap(t, l, llm(t, s), adapter.Options{AgentID: "researcher"})
	router := wrap(t, l, &routerModel{m: researcher}, adapter.Options{AgentID: "router"})
	tool := adapter.WrapTool(l, "tool:", &modelTool{m: researcher})
	step := adapter.WithAgentID(context.Background(), "writer/plan")
	if _, err := writer.GenerateContent(step, hi); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Call(step, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := router.GenerateContent(step, hi); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"writer/plan": 2, "tool:search": 1, "researcher": 2, "writer": 0, "router": 0} {
		if got := l.Stats(id).Calls; got != want {
			t.Errorf("%s: %d calls, want %d", id, got, want)
		}
	}
}
