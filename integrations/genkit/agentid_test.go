package genkit_test

import (
	"context"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

type searchInput struct {
	Q string `json:"q"`
}

// TestAgentIDNotPassedToNestedCalls: WithAgentID names a flow step
// ("writer/plan") for the model calls of the Generate call made with its
// context, not for the calls nested in them. The step's Generate call
// uses a tool that asks another agent, whose middleware's AgentID is
// "researcher": the step's two model calls are booked under
// "writer/plan", the researcher's under "researcher", with the step's
// middleware's ToolPrefix set or not. So too for a tool function of
// WrapTool called with the step's context, and for a model that itself
// asks the researcher. Before, the step's ID reached the nested call,
// which was booked (and configured) as "writer/plan", and "researcher"
// got none.
func TestAgentIDNotPassedToNestedCalls(t *testing.T) {
	step := adapter.WithAgentID(context.Background(), "writer/plan")
	for _, prefix := range []string{"tool:", ""} {
		s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
			if n == 1 {
				return toolCall
			}
			return oaifake.OK("done")
		})
		g := newGenkit(s.URL, nil)
		l := newLoop(t, si.WithStrategy(nil))
		rmw := middleware(t, l, adapter.Options{AgentID: "researcher"})
		search := genkit.DefineTool(g, "search", "searches", func(tc *ai.ToolContext, in searchInput) (string, error) {
			resp, err := genkit.Generate(tc, g, ai.WithModelName("openai/gpt-4o-mini"), ai.WithPrompt(in.Q), ai.WithUse(rmw))
			if err != nil {
				return "", err
			}
			return resp.Text(), nil
		})
		resp, err := genkit.Generate(step, g, ai.WithModelName("openai/gpt-4o"), ai.WithPrompt("find x"), ai.WithTools(search),
			ai.WithUse(middleware(t, l, adapter.Options{AgentID: "writer", ToolPrefix: prefix})))
		if err != nil || resp.Text() != "done" {
			t.Fatalf("ToolPrefix %q: %v; requests %q", prefix, err, s.Requests())
		}
		want := map[string]int{"writer/plan": 2, "researcher": 1, "writer": 0, "tool:search": 0}
		if prefix != "" {
			want["tool:search"] = 1
		}
		for id, n := range want {
			if got := l.Stats(id).Calls; got != n {
				t.Errorf("ToolPrefix %q: %s has %d calls, want %d", prefix, id, got, n)
			}
		}
	}

	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("found") })
	g := newGenkit(s.URL, nil)
	l := newLoop(t, si.WithStrategy(nil))
	rmw := middleware(t, l, adapter.Options{AgentID: "researcher"})
	ask := func(ctx context.Context) (string, error) {
		resp, err := genkit.Generate(ctx, g, ai.WithModelName("openai/gpt-4o-mini"), ai.WithPrompt("x"), ai.WithUse(rmw))
		if err != nil {
			return "", err
		}
		return resp.Text(), nil
	}
	lookup := adapter.WrapTool(l, "tool:lookup", func(tc *ai.ToolContext, _ searchInput) (string, error) { return ask(tc) })
	if _, err := lookup(&ai.ToolContext{Context: step}, searchInput{Q: "x"}); err != nil {
		t.Fatal(err)
	}
	// A model that asks the researcher itself (a router, say).
	genkit.DefineModel(g, "test/router", nil, func(ctx context.Context, _ *ai.ModelRequest, _ ai.ModelStreamCallback) (*ai.ModelResponse, error) {
		text, err := ask(ctx)
		if err != nil {
			return nil, err
		}
		return &ai.ModelResponse{Message: ai.NewModelTextMessage(text)}, nil
	})
	if _, err := genkit.Generate(step, g, ai.WithModelName("test/router"), ai.WithPrompt("x"),
		ai.WithUse(middleware(t, l, adapter.Options{AgentID: "router"}))); err != nil {
		t.Fatal(err)
	}
	for id, n := range map[string]int{"writer/plan": 1, "researcher": 2, "tool:lookup": 1, "router": 0} {
		if got := l.Stats(id).Calls; got != n {
			t.Errorf("WrapTool, router: %s has %d calls, want %d", id, got, n)
		}
	}
}
