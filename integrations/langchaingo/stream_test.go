package langchaingo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
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

// sseReply is a whole streamed answer whose tokens are texts, or, with
// final false, one the server closes before "data: [DONE]".
func sseReply(final bool, texts ...string) reply {
	ev := []string{startEvent}
	for _, t := range texts {
		ev = append(ev, tokenEvent(t))
	}
	if final {
		ev = append(ev, endEvents...)
	}
	return reply{status: http.StatusOK, headers: map[string]string{"Content-Type": "text/event-stream"}, body: strings.Join(ev, "\n\n") + "\n\n"}
}

// streamLLM is langchaingo's OpenAI client at url, through the adapter's
// HTTPClient.
func streamLLM(url string) *openai.LLM {
	m, err := openai.New(openai.WithToken("sk-test"), openai.WithBaseURL(url+"/v1"), openai.WithModel("gpt-4.1"),
		openai.WithHTTPClient(adapter.HTTPClient(nil)))
	if err != nil {
		panic(err)
	}
	return m
}

// langchainStream: the suite every adapter's Stream passes, with
// langchaingo's OpenAI client and llms.WithStreamingFunc, each attempt
// made by adapter.Generate as Model makes it.
var langchainStream = streamtest.Provider{
	Start: []string{startEvent},
	Token: tokenEvent,
	End:   endEvents,
	// A server error inside the 200 stream.
	Error:      `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	ErrorClass: failure.ClassOverloaded,
	Call: func(ctx context.Context, url string, onToken func()) (string, error) {
		var b strings.Builder
		_, err := adapter.Generate(ctx, streamLLM(url), "", hi, llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
			if len(chunk) > 0 {
				b.Write(chunk)
				onToken()
			}
			return nil
		}))
		return b.String(), err
	},
}

func TestStream(t *testing.T) { streamtest.Run(t, langchainStream) }

// TestStreamTruncatedRetried: through Model, a stream the server closes
// without "data: [DONE]" is a failure, retried; the streaming function
// sees each attempt's chunks, and the answer is the whole one.
func TestStreamTruncatedRetried(t *testing.T) {
	s := newServer(t, func(_ string, n int) reply { return sseReply(n > 1, "Hel", "lo") })
	l := newLoop(t)
	var mu sync.Mutex
	var chunks []string
	resp, err := wrap(t, l, llm(t, s), adapter.Options{}).GenerateContent(context.Background(), hi,
		llms.WithStreamingFunc(func(_ context.Context, c []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if len(c) > 0 {
				chunks = append(chunks, string(c))
			}
			return nil
		}))
	if err != nil || resp.Choices[0].Content != "Hello" || len(s.requests()) != 2 || strings.Join(chunks, "|") != "Hel|lo|Hel|lo" {
		t.Fatalf("%v, %+v after %d requests; chunks %q", err, resp, len(s.requests()), chunks)
	}
}

// TestStreamCallbackError: an error of the caller's streaming function
// is the caller's, not a broken stream: it is returned as it is, and
// not retried as a network failure.
func TestStreamCallbackError(t *testing.T) {
	s := newServer(t, func(string, int) reply { return sseReply(true, "Hel", "lo") })
	l := newLoop(t)
	stop := errors.New("enough")
	_, err := wrap(t, l, llm(t, s), adapter.Options{}).GenerateContent(context.Background(), hi,
		llms.WithStreamingFunc(func(context.Context, []byte) error { return stop }))
	if !errors.Is(err, stop) || failure.Classify(err) == failure.ClassNetwork || len(s.requests()) != 1 {
		t.Fatalf("err %v (class %q) after %d requests: want the callback's error, not retried", err, failure.Classify(err), len(s.requests()))
	}
}
