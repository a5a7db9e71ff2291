package eino_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// hooked is an Eino ChatModelAgent on Eino's OpenAI model at url, with
// the adapter's Middleware in its Handlers (Eino's own retries off), run
// by a Runner that streams or not.
func hooked(t *testing.T, l *si.Loop, url string, o adapter.Options, streaming bool, cfg adk.ToolsConfig) *adk.Runner {
	t.Helper()
	o.AgentID = "a"
	mw, err := adapter.NewMiddleware(l, o)
	if err != nil {
		t.Fatal(err)
	}
	a, err := adk.NewChatModelAgent(context.Background(), &adk.ChatModelAgentConfig{Name: "a", Description: "answers", Instruction: "Answer briefly.",
		Model: chatModel(url, nil), ToolsConfig: cfg, Handlers: []adk.ChatModelAgentMiddleware{mw}})
	if err != nil {
		t.Fatal(err)
	}
	return adk.NewRunner(context.Background(), adk.RunnerConfig{Agent: a, EnableStreaming: streaming})
}

// TestMiddlewareHook runs an agent whose model calls go through the
// Middleware hook (ChatModelAgentConfig.Handlers, WrapModel), streaming
// and not, against the fake OpenAI server: a withdrawn model is moved to
// the fallback with no run failing; a 429's Retry-After is waited before
// the next attempt; an answer Check refuses is retried.
func TestMiddlewareHook(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		// One server for both modes: a streamed answer is OpenAI's events
		// in a 200 (SSEReply), an error the JSON body of its status.
		reply := func(model string, n int) oaifake.Reply {
			ok := func(texts ...string) oaifake.Reply {
				if streaming {
					return oaifake.SSEReply(true, texts...)
				}
				return oaifake.OK(strings.Join(texts, ""))
			}
			switch {
			case model == "gpt-4.1":
				return oaifake.ModelNotFound(model)
			case model == "rl" && n == 1:
				return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
			case model == "bad" && n == 1:
				return ok(`{"answer": `, `4`)
			}
			return ok(`{"answer": `, `42}`)
		}
		server := func() *oaifake.Server { return oaifake.NewServer(t, reply) }
		s := server()
		// A withdrawn model: the agent moves to the fallback.
		clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		r := hooked(t, l, s.URL, adapter.Options{Routes: routes}, streaming, adk.ToolsConfig{})
		fails := 0
		for range 30 {
			if answer, err := ask(context.Background(), r, "hi"); err != nil || answer != `{"answer": 42}` {
				fails++
			}
			clk.Advance(time.Minute)
		}
		got := s.Requests()
		if fails != 0 || got[0] != "gpt-4.1" || got[1] != "gpt-4o" || l.Config("a").Route != "gpt-4o" {
			t.Errorf("streaming %v: %d runs failed; requests %q; route %q", streaming, fails, got[:2], l.Config("a").Route)
		}
		// A 429: its Retry-After waited; a bad output: retried.
		check := func(m *schema.Message) error {
			var v struct{ Answer int }
			return json.Unmarshal([]byte(m.Content), &v)
		}
		for _, model := range []string{"rl", "bad"} {
			l := newLoop(t, si.WithDefaultConfig(si.Config{Route: model, MaxAttempts: 2}))
			s, n := server(), 0
			start := time.Now()
			answer, err := ask(context.Background(), hooked(t, l, s.URL, adapter.Options{Check: check}, streaming, adk.ToolsConfig{}), "hi")
			at := s.At()
			if err != nil || answer != `{"answer": 42}` || len(at) != n+2 || l.Stats("a").Failures != 0 {
				t.Fatalf("streaming %v, %s: %q, %v after %d requests", streaming, model, answer, err, len(at)-n)
			}
			if gap := at[n+1].Sub(at[n]); model == "rl" && gap < time.Second {
				t.Errorf("streaming %v: second request %v after the 429, before the 1s it asked", streaming, gap)
			}
			if model == "bad" && time.Since(start) > time.Second {
				t.Errorf("streaming %v: a bad output retried after %v, not at once", streaming, time.Since(start))
			}
		}
	}
	if _, err := adapter.NewMiddleware(newLoop(t), adapter.Options{}); !errors.Is(err, adapter.ErrNoAgentID) {
		t.Errorf("NewMiddleware without an AgentID: %v", err)
	}
}
