package genkit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
)

// req is the request "hi".
var req = &ai.ModelRequest{Messages: []*ai.Message{ai.NewUserTextMessage("hi")}}

// genkitStream: the suite every adapter's Stream passes, with Genkit's
// OpenAI-compatible plugin, each attempt made by adapter.Generate as the
// middleware makes it.
var genkitStream = oaifake.Stream(func(ctx context.Context, url string, onToken func()) (string, error) {
	var b strings.Builder
	m := genkit.LookupModel(newGenkit(url, nil), "openai/gpt-4.1")
	_, err := adapter.Generate(ctx, m.Generate, req, func(_ context.Context, c *ai.ModelResponseChunk) error {
		if t := c.Text(); t != "" {
			b.WriteString(t)
			onToken()
		}
		return nil
	})
	return b.String(), err
})

func TestStream(t *testing.T) { streamtest.Run(t, genkitStream) }

// TestStreamTruncatedRetried: through the middleware, a stream the
// server closes without "data: [DONE]" is a failure, retried; the
// callback sees each attempt's chunks, and the answer is the whole one.
func TestStreamTruncatedRetried(t *testing.T) {
	s := oaifake.NewSSEServer(t, func(_ string, n int) []string {
		if n == 1 {
			return []string{oaifake.StartEvent, oaifake.TokenEvent("Hel")}
		}
		return oaifake.SSE("Hel", "lo")
	})
	l := newLoop(t)
	var chunks []string
	text, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), func(_ context.Context, c *ai.ModelResponseChunk) error {
		chunks = append(chunks, c.Text())
		return nil
	})
	if err != nil || text != "Hello" || len(s.Requests()) != 2 || strings.Join(chunks, "|") != "Hel|Hel|lo" {
		t.Fatalf("%v, %q after %d requests; chunks %q", err, text, len(s.Requests()), chunks)
	}
}
