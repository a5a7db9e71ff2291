package openai_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	oai "github.com/openai/openai-go/v3"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
)

// longRequest is a request of about 10,000 tokens of prompt that offers a
// tool.
func longRequest() oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{MaxCompletionTokens: oai.Int(1024),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(strings.Repeat("word ", 8_000))},
		Tools:    []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "lookup"})},
	}
}

func TestNeedsOf(t *testing.T) {
	n := adapter.NeedsOf(longRequest())
	if n.Tokens < 10_000+1024 || n.Tokens > 11_000+1024 || !n.Tools || n.Prefill || n.Stream {
		t.Errorf("NeedsOf = %+v; want about 11,000 tokens (40,000 bytes of text and max_completion_tokens 1,024), tools", n)
	}
	pre := oai.ChatCompletionNewParams{Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi"), oai.AssistantMessage("Sure:")}}
	if n := adapter.NeedsOf(pre); n.Tokens > 64 || n.Tools || !n.Prefill {
		t.Errorf("NeedsOf(a short prefill) = %+v", n)
	}
}

// TestRequestGoesToTheRouteThatFits: issue 40, item 4, with the real
// client. The ladder declares a small primary and a fallback that takes
// no tools: a long request with tools is sent once, to the route that
// takes it; a short one goes to the primary.
func TestRequestGoesToTheRouteThatFits(t *testing.T) {
	var long atomic.Bool
	long.Store(true)
	s := newServer(t, func(model string, _ int) reply {
		switch {
		case model == "gpt-4o-mini" && long.Load():
			return apiErr(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8192 tokens. However, your messages resulted in 11250 tokens. Please reduce the length of the messages.", nil)
		case model == "o1-mini":
			return apiErr(400, "invalid_request_error", "unsupported_parameter", "Unsupported parameter: 'tools' is not supported with this model.", nil)
		}
		return ok
	})
	routes := si.Routes{Primary: "gpt-4o-mini", Fallbacks: []string{"o1-mini", "gpt-4.1"},
		Limits: map[string]si.RouteLimits{
			"gpt-4o-mini": {ContextTokens: 8_192},
			"o1-mini":     {ContextTokens: 128_000, NoTools: true},
			"gpt-4.1":     {ContextTokens: 1_047_576},
		}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	call := func(params oai.ChatCompletionNewParams) error {
		ctx := si.WithNeeds(context.Background(), adapter.NeedsOf(params))
		_, err := l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, cfg si.Config) error {
			params.Model = routes.Model(cfg)
			_, err := cl.Chat.Completions.New(ctx, params)
			return adapter.Wrap(err)
		})
		return err
	}
	if err := call(longRequest()); err != nil {
		t.Fatal(err)
	}
	if s.mu.Lock(); !slices.Equal(s.models, []string{"gpt-4.1"}) {
		t.Errorf("the long request with tools was sent to %q; want once, to the route that takes it", s.models)
	}
	s.models = nil
	s.mu.Unlock()
	long.Store(false)
	if err := call(oai.ChatCompletionNewParams{Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}); err != nil {
		t.Fatal(err)
	}
	if s.mu.Lock(); !slices.Equal(s.models, []string{"gpt-4o-mini"}) {
		t.Errorf("a short question was sent to %q; want the primary", s.models)
	}
	s.mu.Unlock()
}
