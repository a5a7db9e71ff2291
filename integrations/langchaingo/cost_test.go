package langchaingo_test

import (
	"context"
	"testing"

	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/price"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

// TestTokenCosts: through HTTPClient(price.Transport(nil, prices)), a
// call of Model and a streamed one (llms.WithStreamingFunc) book their
// answer's token usage as the call's cost (langchaingo's OpenAI client
// asks a stream for its usage chunk), with no start-up call.
func TestTokenCosts(t *testing.T) {
	s := oaifake.NewUsageServer(t)
	l := newLoop(t)
	inner, err := openai.New(openai.WithToken("sk-test"), openai.WithBaseURL(s.URL+"/v1"), openai.WithModel("gpt-4o"),
		openai.WithHTTPClient(adapter.HTTPClient(price.Transport(nil, oaifake.UsagePrices))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrap(t, l, inner, adapter.Options{AgentID: "generate"}).GenerateContent(context.Background(), hi); err != nil {
		t.Fatal(err)
	}
	var text []byte
	_, err = wrap(t, l, inner, adapter.Options{AgentID: "stream"}).GenerateContent(context.Background(), hi,
		llms.WithStreamingFunc(func(_ context.Context, c []byte) error { text = append(text, c...); return nil }))
	if err != nil || string(text) != "Hello" {
		t.Fatalf("%v, %q", err, text)
	}
	if a := s.AskedUsage(); len(a) != 1 || !a[0] {
		t.Errorf("streams asked for their usage: %v", a)
	}
	oaifake.CheckCosts(t, l)
}
