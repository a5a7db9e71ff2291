package eino_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// toolCall is OpenAI's chat completion asking for the tool name with the
// input {"q":"x"}.
func toolCall(name string) oaifake.Reply {
	return oaifake.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
		`"tool_calls":[{"id":"call_` + name + `","type":"function","function":{"name":"` + name + `","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`}
}

type query struct {
	Q string `json:"q"`
}

// toolNames are the tools of flakyTools, in the order the fake server
// asks for them.
var toolNames = []string{"search", "lookup"}

// flakyTools are an invokable tool "search" and a streamable tool
// "lookup", each failing its first call with a transient error; calls
// counts the calls of each.
func flakyTools(t *testing.T, calls map[string]int) []tool.BaseTool {
	t.Helper()
	search, err1 := utils.InferTool("search", "searches", func(_ context.Context, in query) (string, error) {
		return "found " + in.Q, flaky(calls, "search")
	})
	lookup, err2 := utils.InferStreamTool("lookup", "looks up", func(_ context.Context, in query) (*schema.StreamReader[string], error) {
		if err := flaky(calls, "lookup"); err != nil {
			return nil, err
		}
		return schema.StreamReaderFromArray([]string{"looked ", "up ", in.Q}), nil
	})
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return []tool.BaseTool{search, lookup}
}

// flaky counts a call of the tool name and fails the first with a
// transient error.
func flaky(calls map[string]int, name string) error {
	if calls[name]++; calls[name] == 1 {
		return errors.New("503 service unavailable")
	}
	return nil
}

// TestMiddlewareToolHook: an agent with the Middleware in its Handlers
// and two tools (one invokable, one streamable), run by a real
// adk.Runner against the fake OpenAI server, which asks for "search",
// then "lookup", then answers. With Options.ToolPrefix, Eino calls each
// tool through the Middleware's WrapInvokableToolCall and
// WrapStreamableToolCall hooks: each tool is an agent of its own
// ("tool:search", "tool:lookup") whose failed first call the loop
// retries, and the three model calls are booked under the agent.
// Without ToolPrefix, the tool's failure ends the run.
func TestMiddlewareToolHook(t *testing.T) {
	for _, prefix := range []string{"tool:", ""} {
		s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
			if n <= len(toolNames) {
				return toolCall(toolNames[n-1])
			}
			return oaifake.OK("done")
		})
		l := newLoop(t, si.WithStrategy(nil), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
			si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
		calls := map[string]int{}
		cfg := adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: flakyTools(t, calls)}}
		answer, err := ask(context.Background(), hooked(t, l, s.URL, adapter.Options{ToolPrefix: prefix}, false, cfg), "find x")
		if prefix == "" {
			if err == nil || calls["search"] != 1 || l.Stats("tool:search").Calls != 0 {
				t.Errorf("no ToolPrefix: %q, %v after %d search calls; want the tool's error after one", answer, err, calls["search"])
			}
			continue
		}
		if err != nil || answer != "done" {
			t.Fatalf("run: %q, %v after tool calls %v; want the answer", answer, err, calls)
		}
		for _, name := range toolNames {
			if ts := l.Stats(prefix + name); calls[name] != 2 || ts.Calls != 1 || ts.Failures != 0 {
				t.Errorf("%s: %d calls, stats %+v; want 2 calls booked as 1 successful call", name, calls[name], ts)
			}
		}
		if ms := l.Stats("a"); ms.Calls != len(toolNames)+1 {
			t.Errorf("model stats %+v: want %d model calls", ms, len(toolNames)+1)
		}
	}
}

// TestMiddlewareEnhancedToolHooks: the Middleware's hooks for Eino's
// enhanced tools (multimodal results), called as Eino's ToolsNode calls
// them (Eino's OpenAI model cannot send an enhanced tool's result back,
// so no Runner): each call runs through the loop as "tool:" and the
// tool's name, its failed first call retried; without ToolPrefix, the
// tool runs once, as it is, unbooked.
func TestMiddlewareEnhancedToolHooks(t *testing.T) {
	l := newLoop(t, si.WithStrategy(nil), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
	mw, err := adapter.NewMiddleware(l, adapter.Options{AgentID: "a", ToolPrefix: "tool:"})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	result := &schema.ToolResult{Parts: []schema.ToolOutputPart{{Type: schema.ToolPartTypeText, Text: "fetched"}}}
	ctx, arg := context.Background(), &schema.ToolArgument{Text: `{"q":"x"}`}
	fetch, err := mw.WrapEnhancedInvokableToolCall(ctx, func(context.Context, *schema.ToolArgument, ...tool.Option) (*schema.ToolResult, error) {
		return result, flaky(calls, "fetch")
	}, &adk.ToolContext{Name: "fetch", CallID: "call_1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fetch(ctx, arg); err != nil || got != result {
		t.Errorf("fetch: %v, %v", got, err)
	}
	watch, err := mw.WrapEnhancedStreamableToolCall(ctx, func(context.Context, *schema.ToolArgument, ...tool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
		if err := flaky(calls, "watch"); err != nil {
			return nil, err
		}
		return schema.StreamReaderFromArray([]*schema.ToolResult{result}), nil
	}, &adk.ToolContext{Name: "watch", CallID: "call_2"})
	if err != nil {
		t.Fatal(err)
	}
	if sr, err := watch(ctx, arg); err != nil {
		t.Errorf("watch: %v", err)
	} else if got, err := sr.Recv(); err != nil || got != result {
		t.Errorf("watch's stream: %v, %v", got, err)
	}
	for _, name := range []string{"fetch", "watch"} {
		if ts := l.Stats("tool:" + name); calls[name] != 2 || ts.Calls != 1 || ts.Failures != 0 {
			t.Errorf("%s: %d calls, stats %+v; want 2 calls booked as 1 successful call", name, calls[name], ts)
		}
	}
	plain, _ := adapter.NewMiddleware(l, adapter.Options{AgentID: "a"})
	fetch, _ = plain.WrapEnhancedInvokableToolCall(ctx, func(context.Context, *schema.ToolArgument, ...tool.Option) (*schema.ToolResult, error) {
		return nil, flaky(calls, "other")
	}, &adk.ToolContext{Name: "other"})
	if _, err := fetch(ctx, arg); err == nil || calls["other"] != 1 || l.Stats("tool:other").Calls != 0 {
		t.Errorf("no ToolPrefix: %v after %d calls; want the tool's error after one, unbooked", err, calls["other"])
	}
}
