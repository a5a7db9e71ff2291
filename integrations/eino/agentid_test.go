package eino_test

import (
	"context"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// researching is a tool "search" that asks researcher.
func researching(t *testing.T, researcher model.BaseChatModel) tool.InvokableTool {
	t.Helper()
	search, err := utils.InferTool("search", "searches", func(ctx context.Context, in query) (string, error) {
		msg, err := researcher.Generate(ctx, []*schema.Message{schema.UserMessage(in.Q)})
		if err != nil {
			return "", err
		}
		return msg.Content, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return search
}

// TestAgentIDNotPassedToNestedCalls: WithAgentID names a step ("a/plan")
// for the model calls made with its context, not for the calls nested in
// them. An agent run with the step's context (the Middleware, with and
// without ToolPrefix) calls a tool that asks another wrapped model,
// Options.AgentID "researcher": the agent's two model calls are booked
// under "a/plan", the researcher's under "researcher". So with the
// compose ToolMiddleware (invokable and streamable), and with an inner
// model that itself calls the researcher. Before, the step's ID reached
// the nested call, which was booked (and configured) as "a/plan", and
// "researcher" got none.
func TestAgentIDNotPassedToNestedCalls(t *testing.T) {
	newServer := func() *oaifake.Server {
		return oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
			if n == 1 {
				return toolCall("search")
			}
			return oaifake.OK("done")
		})
	}
	step := adapter.WithAgentID(context.Background(), "a/plan")
	for _, prefix := range []string{"tool:", ""} {
		s := newServer()
		l := newLoop(t, si.WithStrategy(nil))
		researcher := wrap(t, l, chatModel(s.URL, nil), adapter.Options{AgentID: "researcher"})
		cfg := adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{researching(t, researcher)}}}
		if answer, err := ask(step, hooked(t, l, s.URL, adapter.Options{ToolPrefix: prefix}, false, cfg), "find x"); err != nil || answer != "done" {
			t.Fatalf("ToolPrefix %q: %q, %v; requests %q", prefix, answer, err, s.Requests())
		}
		want := map[string]int{"a/plan": 2, "researcher": 1, "a": 0, "tool:search": 0}
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
	l := newLoop(t, si.WithStrategy(nil))
	researcher := wrap(t, l, chatModel(s.URL, nil), adapter.Options{AgentID: "researcher"})
	mw := adapter.ToolMiddleware(l, "tool:")
	invoke := mw.Invokable(func(ctx context.Context, in *compose.ToolInput) (*compose.ToolOutput, error) {
		out, err := researching(t, researcher).InvokableRun(ctx, in.Arguments)
		return &compose.ToolOutput{Result: out}, err
	})
	if _, err := invoke(step, &compose.ToolInput{Name: "search", Arguments: `{"q":"x"}`}); err != nil {
		t.Fatal(err)
	}
	stream := mw.Streamable(func(ctx context.Context, in *compose.ToolInput) (*compose.StreamToolOutput, error) {
		out, err := researching(t, researcher).InvokableRun(ctx, in.Arguments)
		return &compose.StreamToolOutput{Result: schema.StreamReaderFromArray([]string{out})}, err
	})
	if _, err := stream(step, &compose.ToolInput{Name: "lookup", Arguments: `{"q":"x"}`}); err != nil {
		t.Fatal(err)
	}
	// An inner model that asks the researcher itself (a router, say).
	router := wrap(t, l, &asking{researcher}, adapter.Options{AgentID: "router"})
	if _, err := router.Generate(step, hi); err != nil {
		t.Fatal(err)
	}
	for id, n := range map[string]int{"a/plan": 1, "researcher": 3, "tool:search": 1, "tool:lookup": 1, "router": 0} {
		if got := l.Stats(id).Calls; got != n {
			t.Errorf("ToolMiddleware, router: %s has %d calls, want %d", id, got, n)
		}
	}
}

// asking is a model that answers with what m answers.
type asking struct{ m model.BaseChatModel }

func (a *asking) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return a.m.Generate(ctx, in)
}

func (a *asking) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return a.m.Stream(ctx, in)
}

func (a *asking) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return a, nil }
