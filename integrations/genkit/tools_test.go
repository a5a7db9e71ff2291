package genkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// TestWrapTool runs a Genkit tool function through the loop: it is an
// agent of its own, a transient failure is retried, and it sees the
// config's timeout.
func TestWrapTool(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := 0
	search := adapter.WrapTool(l, "tool:search", func(tc *ai.ToolContext, q string) (string, error) {
		calls++
		if _, ok := tc.Deadline(); !ok {
			return "", errors.New("no deadline")
		}
		if calls == 1 {
			return "", errors.New("503 service unavailable")
		}
		return "found " + q, nil
	})
	out, err := search(&ai.ToolContext{Context: context.Background()}, "x")
	if err != nil || out != "found x" || calls != 2 {
		t.Fatalf("search: %q, %v after %d calls; want the second attempt's answer", out, err, calls)
	}
	if s := l.Stats("tool:search"); s.Calls != 1 || s.Failures != 0 {
		t.Errorf("tool:search stats %+v, want 1 successful call", s)
	}
}

// toolCall is OpenAI's chat completion asking for the tool "search" with
// the input {"q":"x"}.
var toolCall = oaifake.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
	`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`}

// TestToolHook: genkit.Generate with a tool, against the fake OpenAI
// server (a tool call, then the answer), and the middleware with
// ToolPrefix: Genkit calls the tool through the middleware's WrapTool
// hook, so the tool is an agent of its own ("tool:search") whose failed
// call the loop retries; both model calls are booked under the agent.
// Without ToolPrefix, the tool's failure ends the Generate call.
func TestToolHook(t *testing.T) {
	for _, prefix := range []string{"tool:", ""} {
		s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
			if n == 1 {
				return toolCall
			}
			return oaifake.OK("found")
		})
		g := newGenkit(s.URL, nil)
		l := newLoop(t, si.WithStrategy(nil), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
			si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
		calls := 0
		search := genkit.DefineTool(g, "search", "searches", func(tc *ai.ToolContext, in struct {
			Q string `json:"q"`
		}) (string, error) {
			if calls++; calls == 1 {
				return "", errors.New("503 service unavailable")
			}
			return "found " + in.Q, nil
		})
		resp, err := genkit.Generate(context.Background(), g, ai.WithModelName("openai/gpt-4o"), ai.WithPrompt("find x"),
			ai.WithTools(search), ai.WithUse(middleware(t, l, adapter.Options{ToolPrefix: prefix})))
		if prefix == "" {
			if err == nil || calls != 1 || l.Stats("tool:search").Calls != 0 {
				t.Errorf("no ToolPrefix: %v after %d tool calls, want the tool's error after one", err, calls)
			}
			continue
		}
		if err != nil || resp.Text() != "found" || calls != 2 {
			t.Fatalf("Generate: %v after %d tool calls; want the answer after 2", err, calls)
		}
		if ts, ms := l.Stats("tool:search"), l.Stats("a"); ts.Calls != 1 || ts.Failures != 0 || ms.Calls != 2 {
			t.Errorf("tool:search stats %+v, model stats %+v: want 1 tool call and 2 model calls", ts, ms)
		}
	}
}
