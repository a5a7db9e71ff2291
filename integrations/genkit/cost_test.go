package genkit_test

import (
	"context"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/openai/openai-go"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/price"
)

// TestTokenCosts: through ClientOptions(price.Transport(nil, prices)),
// a call under the middleware and a streamed one book their answer's
// token usage as the call's cost, with no start-up call. Genkit's
// OpenAI-compatible plugin does not ask a stream for its usage chunk:
// the request's config does (StreamOptions.IncludeUsage); a stream
// that does not ask books nothing.
func TestTokenCosts(t *testing.T) {
	s := oaifake.NewUsageServer(t)
	l := newLoop(t)
	g := newGenkit(s.URL, price.Transport(nil, oaifake.UsagePrices))
	call := func(id string, opts ...ai.GenerateOption) {
		t.Helper()
		opts = append(opts, ai.WithModelName("openai/gpt-4o"), ai.WithPrompt("hi"), ai.WithUse(middleware(t, l, adapter.Options{AgentID: id})))
		if _, err := genkit.Generate(context.Background(), g, opts...); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	stream := ai.WithStreaming(func(context.Context, *ai.ModelResponseChunk) error { return nil })
	call("generate")
	call("stream", stream, ai.WithConfig(&openai.ChatCompletionNewParams{StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}))
	call("stream without usage", stream)
	if a := s.AskedUsage(); len(a) != 2 || !a[0] || a[1] {
		t.Errorf("streams asked for their usage: %v; want [true false]", a)
	}
	oaifake.CheckCosts(t, l)
	if st := l.Stats("stream without usage"); st.Costed != 0 {
		t.Errorf("a stream that did not ask for its usage costed %d calls", st.Costed)
	}
}
