package eino_test

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

	"github.com/cloudwego/eino/schema"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
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

// readAll concatenates a stream's chunks.
func readAll(sr *schema.StreamReader[*schema.Message], err error) (*schema.Message, error) {
	if err != nil {
		return nil, err
	}
	defer sr.Close()
	var chunks []*schema.Message
	for {
		m, err := sr.Recv()
		if err == io.EOF {
			return schema.ConcatMessages(chunks)
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, m)
	}
}

// einoStream: the suite every adapter's Stream passes, with Eino's
// OpenAI model.
var einoStream = streamtest.Provider{
	Start: []string{startEvent},
	Token: tokenEvent,
	End:   endEvents,
	// A server error inside the 200 stream.
	Error:      `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	ErrorClass: failure.ClassOverloaded,
	Call: func(ctx context.Context, url string, onToken func()) (string, error) {
		var b strings.Builder
		_, err := adapter.Stream(ctx, chatModel(url, nil), "gpt-4.1", hi, func(m *schema.Message) {
			if m.Content != "" {
				b.WriteString(m.Content)
				onToken()
			}
		})
		return b.String(), err
	},
}

func TestStream(t *testing.T) { streamtest.Run(t, einoStream) }

// TestStreamTruncatedRetried: through Model.Stream, a stream the server
// closes without "data: [DONE]" is a failure, retried; the reader holds
// the whole answer of the attempt that ended.
func TestStreamTruncatedRetried(t *testing.T) {
	s := newSSEServer(t, func(_ string, n int) []string {
		if n == 1 {
			return []string{startEvent, tokenEvent("Hel")}
		}
		return sse("Hel", "lo")
	})
	l := newLoop(t)
	m := wrap(t, l, chatModel(s.URL, nil), adapter.Options{})
	msg, err := readAll(m.Stream(context.Background(), hi))
	if err != nil || msg.Content != "Hello" || len(s.requests()) != 2 {
		t.Fatalf("%v, %+v after %d requests", err, msg, len(s.requests()))
	}
}
