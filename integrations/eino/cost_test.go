package eino_test

import (
	"context"
	"testing"

	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/price"
)

// TestTokenCosts: through HTTPClient(price.Transport(nil, prices)),
// Model.Generate and Model.Stream book their answer's token usage as
// the call's cost (Eino's OpenAI model asks a stream for its usage
// chunk), with no start-up call.
func TestTokenCosts(t *testing.T) {
	s := oaifake.NewUsageServer(t)
	l := newLoop(t)
	inner := chatModel(s.URL, price.Transport(nil, oaifake.UsagePrices))
	gen := wrap(t, l, inner, adapter.Options{AgentID: "generate"})
	str := wrap(t, l, inner, adapter.Options{AgentID: "stream"})
	if _, err := gen.Generate(context.Background(), hi); err != nil {
		t.Fatal(err)
	}
	if msg, err := readAll(str.Stream(context.Background(), hi)); err != nil || msg.Content != "Hello" {
		t.Fatalf("%v, %+v", err, msg)
	}
	if a := s.AskedUsage(); len(a) != 1 || !a[0] {
		t.Errorf("streams asked for their usage: %v", a)
	}
	oaifake.CheckCosts(t, l)
}
