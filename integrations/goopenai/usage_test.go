package goopenai_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	goai "github.com/sashabaranov/go-openai"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/goopenai"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/price"
)

// Bodies as the OpenAI API sends them (the API reference's examples).
const (
	chatBody   = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`
	chatStream = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

`
)

// TestPricedTransportBooksTokenCosts: through PricedTransport, a chat
// completion and a streamed one with its usage chunk each book their
// tokens' price as the call's cost.
func TestPricedTransportBooksTokenCosts(t *testing.T) {
	if looptest.FreshProcess(t) { // with no start-up call: the first call's cost is booked
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chatStream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatBody)
	}))
	defer srv.Close()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	prices := price.Table{"gpt-4o": {Input: 2.5, Output: 10, CachedInput: 1.25}, "gpt-4o-mini": {Input: 0.15, Output: 0.6}}
	cfg := adapter.ClientConfig("k", adapter.PricedTransport(prices, nil))
	cfg.BaseURL = srv.URL + "/v1"
	client := goai.NewClientWithConfig(cfg)
	req := goai.ChatCompletionRequest{Model: "gpt-4o", Messages: []goai.ChatCompletionMessage{{Role: goai.ChatMessageRoleUser, Content: "hi"}}}
	calls := map[string]func(ctx context.Context) error{
		"chat": func(ctx context.Context) error {
			_, err := client.CreateChatCompletion(ctx, req)
			return adapter.Wrap(err)
		},
		"stream": func(ctx context.Context) error {
			r := req
			r.Model, r.Stream, r.StreamOptions = "gpt-4o-mini", true, &goai.StreamOptions{IncludeUsage: true}
			s, err := client.CreateChatCompletionStream(ctx, r)
			if err != nil {
				return adapter.Wrap(err)
			}
			defer s.Close()
			for {
				if _, err := s.Recv(); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return adapter.Wrap(err)
				}
			}
		},
	}
	want := map[string]float64{"chat": (93*2.5 + 1024*1.25 + 46*10) / 1e6, "stream": (9*0.15 + 12*0.6) / 1e6}
	for id, call := range calls {
		for range 2 {
			if _, err := l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error { return call(ctx) }); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		st := l.Stats(id)
		if st.Costed != 2 || math.Abs(st.CostPerSuccess-want[id]) > 1e-12 {
			t.Errorf("%s: costed %d, cost %g, per success %g; want 2 calls at %g", id, st.Costed, st.Cost, st.CostPerSuccess, want[id])
		}
	}
}
