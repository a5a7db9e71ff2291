package genkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
)

// OpenAI's chat completion stream, as the API sends it: "data: {chunk}"
// events, then "data: [DONE]".
const chunkHead = `{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_1","choices":[`

var (
	startEvent = `data: ` + chunkHead + `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`
	endEvents  = []string{`data: ` + chunkHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`, `data: [DONE]`}
)

func tokenEvent(text string) string {
	return fmt.Sprintf(`data: %s{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`, chunkHead, text)
}

// sse is a whole stream whose tokens are texts.
func sse(texts ...string) []string {
	ev := []string{startEvent}
	for _, t := range texts {
		ev = append(ev, tokenEvent(t))
	}
	return append(ev, endEvents...)
}

// newSSEServer is a fake OpenAI API that streams the events answer
// gives for a request's model and number.
func newSSEServer(t *testing.T, answer func(model string, n int) []string) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		json.Unmarshal(body, &req)
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.models = append(s.models, req.Model)
		n := len(s.at)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range answer(req.Model, n) {
			io.WriteString(w, ev+"\n\n")
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// req is the request "hi".
var req = &ai.ModelRequest{Messages: []*ai.Message{ai.NewUserTextMessage("hi")}}

// genkitStream: the suite every adapter's Stream passes, with Genkit's
// OpenAI-compatible plugin, each attempt made by adapter.Generate as the
// middleware makes it.
var genkitStream = streamtest.Provider{
	Start: []string{startEvent},
	Token: tokenEvent,
	End:   endEvents,
	// A server error inside the 200 stream.
	Error:      `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	ErrorClass: failure.ClassOverloaded,
	Call: func(ctx context.Context, url string, onToken func()) (string, error) {
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
	},
}

func TestStream(t *testing.T) { streamtest.Run(t, genkitStream) }

// TestStreamTruncatedRetried: through the middleware, a stream the
// server closes without "data: [DONE]" is a failure, retried; the
// callback sees each attempt's chunks, and the answer is the whole one.
func TestStreamTruncatedRetried(t *testing.T) {
	s := newSSEServer(t, func(_ string, n int) []string {
		if n == 1 {
			return []string{startEvent, tokenEvent("Hel")}
		}
		return sse("Hel", "lo")
	})
	l := newLoop(t)
	var chunks []string
	text, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), func(_ context.Context, c *ai.ModelResponseChunk) error {
		chunks = append(chunks, c.Text())
		return nil
	})
	if err != nil || text != "Hello" || len(s.requests()) != 2 || strings.Join(chunks, "|") != "Hel|Hel|lo" {
		t.Fatalf("%v, %q after %d requests; chunks %q", err, text, len(s.requests()), chunks)
	}
}
