package anthropic_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
)

// longPrefill is a request of about 10,000 tokens of prompt that ends
// with the assistant's words to continue, and offers a tool.
func longPrefill() ant.MessageNewParams {
	return ant.MessageNewParams{MaxTokens: 1024,
		Messages: []ant.MessageParam{
			ant.NewUserMessage(ant.NewTextBlock(strings.Repeat("word ", 8_000))),
			ant.NewAssistantMessage(ant.NewTextBlock("Here is the summary:")),
		},
		Tools: []ant.ToolUnionParam{{OfTool: &ant.ToolParam{Name: "lookup", InputSchema: ant.ToolInputSchemaParam{}}}},
	}
}

func TestNeedsOf(t *testing.T) {
	n := adapter.NeedsOf(longPrefill())
	if n.Tokens < 10_000+1024 || n.Tokens > 11_000+1024 || !n.Tools || !n.Prefill || n.Stream {
		t.Errorf("NeedsOf = %+v; want about 11,000 tokens (40,000 bytes of text and max_tokens 1,024), tools, a prefill", n)
	}
	short := ant.MessageNewParams{MaxTokens: 16, Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}
	if n := adapter.NeedsOf(short); n.Tokens > 64 || n.Tools || n.Prefill {
		t.Errorf("NeedsOf(a short question) = %+v", n)
	}
}

// TestRequestGoesToTheRouteThatFits: issue 40, item 4, with the real
// client. The ladder declares a small primary and a fallback that takes
// no prefill: a long request with a prefill is sent once, to the route
// that takes it; a short one goes to the primary.
func TestRequestGoesToTheRouteThatFits(t *testing.T) {
	var long atomic.Bool
	long.Store(true)
	s := newServer(t, func(model string, _ int) reply {
		switch {
		case model == "claude-haiku-4-5" && long.Load():
			return apiErr(400, "invalid_request_error", "prompt is too long: 11250 tokens > 8192 maximum", nil)
		case model == "claude-noprefill":
			return apiErr(400, "invalid_request_error", "This model does not support assistant message prefill. The conversation must end with a user message.", nil)
		}
		return ok
	})
	routes := si.Routes{Primary: "claude-haiku-4-5", Fallbacks: []string{"claude-noprefill", "claude-sonnet-4-5"},
		Limits: map[string]si.RouteLimits{
			"claude-haiku-4-5":  {ContextTokens: 8_192},
			"claude-noprefill":  {ContextTokens: 200_000, NoPrefill: true},
			"claude-sonnet-4-5": {ContextTokens: 1_000_000},
		}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	call := func(params ant.MessageNewParams) error {
		ctx := si.WithNeeds(context.Background(), adapter.NeedsOf(params))
		_, err := l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, cfg si.Config) error {
			params.Model = ant.Model(routes.Model(cfg))
			_, err := cl.Messages.New(ctx, params)
			return adapter.Wrap(err)
		})
		return err
	}
	if err := call(longPrefill()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got := slices.Clone(s.models)
	s.mu.Unlock()
	if !slices.Equal(got, []string{"claude-sonnet-4-5"}) {
		t.Errorf("the long request with a prefill was sent to %q; want once, to the route that takes it", got)
	}
	s.mu.Lock()
	s.models = nil
	s.mu.Unlock()
	long.Store(false)
	if err := call(ant.MessageNewParams{MaxTokens: 16, Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}); err != nil {
		t.Fatal(err)
	}
	if s.mu.Lock(); !slices.Equal(s.models, []string{"claude-haiku-4-5"}) {
		t.Errorf("a short question was sent to %q; want the primary", s.models)
	}
	s.mu.Unlock()
}
