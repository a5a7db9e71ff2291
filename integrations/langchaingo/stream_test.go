package langchaingo_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

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
var langchainStream = oaifake.Stream(func(ctx context.Context, url string, onToken func()) (string, error) {
	var b strings.Builder
	_, err := adapter.Generate(ctx, streamLLM(url), "", hi, llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
		if len(chunk) > 0 {
			b.Write(chunk)
			onToken()
		}
		return nil
	}))
	return b.String(), err
})

func TestStream(t *testing.T) { streamtest.Run(t, langchainStream) }

// TestStreamTruncatedRetried: through Model, a stream the server closes
// without "data: [DONE]" is a failure, retried; the streaming function
// sees each attempt's chunks, and the answer is the whole one.
func TestStreamTruncatedRetried(t *testing.T) {
	s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply { return oaifake.SSEReply(n > 1, "Hel", "lo") })
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
	if err != nil || resp.Choices[0].Content != "Hello" || len(s.Requests()) != 2 || strings.Join(chunks, "|") != "Hel|lo|Hel|lo" {
		t.Fatalf("%v, %+v after %d requests; chunks %q", err, resp, len(s.Requests()), chunks)
	}
}

// TestStreamCallbackError: an error of the caller's streaming function
// is the caller's, not a broken stream: it is returned as it is, and
// not retried as a network failure.
func TestStreamCallbackError(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.SSEReply(true, "Hel", "lo") })
	l := newLoop(t)
	stop := errors.New("enough")
	_, err := wrap(t, l, llm(t, s), adapter.Options{}).GenerateContent(context.Background(), hi,
		llms.WithStreamingFunc(func(context.Context, []byte) error { return stop }))
	if !errors.Is(err, stop) || failure.Classify(err) == failure.ClassNetwork || len(s.Requests()) != 1 {
		t.Fatalf("err %v (class %q) after %d requests: want the callback's error, not retried", err, failure.Classify(err), len(s.Requests()))
	}
}
