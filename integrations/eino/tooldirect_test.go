package eino_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// researchers returns a loop and a wrapped model, Options.AgentID
// "researcher", against a fake OpenAI server that answers "found".
func researchers(t *testing.T) (*si.Loop, model.BaseChatModel) {
	t.Helper()
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("found") })
	l := newLoop(t, si.WithStrategy(nil))
	return l, wrap(t, l, chatModel(s.URL, nil), adapter.Options{AgentID: "researcher"})
}

// wantCalls checks the calls booked under each agent ID.
func wantCalls(t *testing.T, l *si.Loop, what string, want map[string]int) {
	t.Helper()
	for id, n := range want {
		if got := l.Stats(id).Calls; got != n {
			t.Errorf("%s: %s has %d calls, want %d", what, id, got, n)
		}
	}
}

// TestToolCalledDirectlyBookedAsItself: a tool that asks another wrapped
// model ("researcher"), wrapped with WrapTool (WrapStreamableTool for a
// streamable one) and called directly, with a step's context
// (WithAgentID "a/plan"), as a graph's lambda node or the user's code
// calls it: the tool is booked as its own agent ("tool:search",
// "tool:lookup"), the researcher's calls under "researcher", none under
// the step, as with sigenkit.WrapTool and silc.WrapTool. Before, Eino's
// tools could only be run through the loop by a ToolsNode or an agent's
// hooks: called directly, the tool was not booked and passed the step's
// ID on, so the researcher was booked (and configured) as "a/plan".
func TestToolCalledDirectlyBookedAsItself(t *testing.T) {
	l, researcher := researchers(t)
	step := adapter.WithAgentID(context.Background(), "a/plan")
	search := adapter.WrapTool(l, "tool:search", researching(t, researcher))
	if out, err := search.InvokableRun(step, `{"q":"x"}`); err != nil || out != "found" {
		t.Fatalf("search: %q, %v", out, err)
	}
	lookup, err := utils.InferStreamTool("lookup", "looks up", func(ctx context.Context, in query) (*schema.StreamReader[string], error) {
		msg, err := researcher.Generate(ctx, []*schema.Message{schema.UserMessage(in.Q)})
		if err != nil {
			return nil, err
		}
		return schema.StreamReaderFromArray([]string{msg.Content}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sr, err := adapter.WrapStreamableTool(l, "tool:lookup", lookup).StreamableRun(step, `{"q":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sr.Recv(); err != nil || got != "found" {
		t.Errorf("lookup's stream: %q, %v", got, err)
	}
	sr.Close()
	wantCalls(t, l, "WrapTool", map[string]int{"a/plan": 0, "researcher": 2, "tool:search": 1, "tool:lookup": 1})
}

// TestToolMiddlewareRunsEnhancedTools: a ToolsNode with ToolMiddleware
// and Eino's enhanced tools (multimodal results), invoked with a step's
// context: each enhanced tool call runs through the loop as "tool:" and
// its name, and the researcher it asks is booked under "researcher".
// Before, ToolMiddleware had no Enhanced hooks: an enhanced tool ran as
// Eino calls it, unbooked, with the step's ID, and the researcher was
// booked as "a/plan".
func TestToolMiddlewareRunsEnhancedTools(t *testing.T) {
	l, researcher := researchers(t)
	ask := func(ctx context.Context, in query) (*schema.ToolResult, error) {
		msg, err := researcher.Generate(ctx, []*schema.Message{schema.UserMessage(in.Q)})
		if err != nil {
			return nil, err
		}
		return &schema.ToolResult{Parts: []schema.ToolOutputPart{{Type: schema.ToolPartTypeText, Text: msg.Content}}}, nil
	}
	fetch, err1 := utils.InferEnhancedTool("fetch", "fetches", ask)
	watch, err2 := utils.InferEnhancedStreamTool("watch", "watches", func(ctx context.Context, in query) (*schema.StreamReader[*schema.ToolResult], error) {
		r, err := ask(ctx, in)
		if err != nil {
			return nil, err
		}
		return schema.StreamReaderFromArray([]*schema.ToolResult{r}), nil
	})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	ctx := context.Background()
	node, err := compose.NewToolNode(ctx, &compose.ToolsNodeConfig{Tools: []tool.BaseTool{fetch, watch},
		ToolCallMiddlewares: []compose.ToolMiddleware{adapter.ToolMiddleware(l, "tool:")}})
	if err != nil {
		t.Fatal(err)
	}
	step := adapter.WithAgentID(ctx, "a/plan")
	for i, name := range []string{"fetch", "watch"} {
		// One call a message: ToolsNode.Stream races on two enhanced
		// tool calls (Eino v0.8.5's tool_node.go:994 shares an err).
		calls := schema.AssistantMessage("", []schema.ToolCall{
			{ID: "call_" + name, Type: "function", Function: schema.FunctionCall{Name: name, Arguments: `{"q":"x"}`}}})
		if out, err := node.Invoke(step, calls); err != nil || len(out) != 1 {
			t.Fatalf("%s: %v, %v", name, out, err)
		}
		sr, err := node.Stream(step, calls)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := schema.ConcatMessageArray(readMessages(t, sr)); err != nil {
			t.Fatal(err)
		}
		wantCalls(t, l, name, map[string]int{"a/plan": 0, "researcher": 2 * (i + 1), "tool:" + name: 2})
	}
}

// readMessages reads sr to its end.
func readMessages(t *testing.T, sr *schema.StreamReader[[]*schema.Message]) [][]*schema.Message {
	t.Helper()
	defer sr.Close()
	var all [][]*schema.Message
	for {
		m, err := sr.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return all
		}
		all = append(all, m)
	}
}
