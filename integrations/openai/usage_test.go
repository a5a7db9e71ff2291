package openai_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
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
	responseBody = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}`
)

// prices in dollars per million tokens.
var prices = price.Table{
	"gpt-4o":      {Input: 2.5, Output: 10, CachedInput: 1.25},
	"gpt-4o-mini": {Input: 0.15, Output: 0.6},
	"gpt-4.1":     {Input: 2, Output: 8},
}

// TestWithPricesBooksTokenCosts: with WithPrices, a chat completion, a
// streamed one with its usage chunk and a Responses API response each
// book their tokens' price as the call's cost, by the model the response
// names (dated, priced by its undated name), cached input at its price.
func TestWithPricesBooksTokenCosts(t *testing.T) {
	if looptest.FreshProcess(t) { // with no start-up call: the first call's cost is booked
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path == "/responses":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, responseBody)
		case strings.Contains(string(body), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			io.WriteString(w, chatStream)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, chatBody)
		}
	}))
	defer srv.Close()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client := oai.NewClient(append(adapter.ClientOptions(nil), option.WithBaseURL(srv.URL), option.WithAPIKey("k"), adapter.WithPrices(prices))...)
	calls := map[string]func(ctx context.Context) error{
		"chat": func(ctx context.Context) error {
			_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
			return adapter.Wrap(err)
		},
		"stream": func(ctx context.Context) error {
			c, err := adapter.Stream(ctx, &client, oai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
				StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}}, nil)
			if err == nil && c.Usage.TotalTokens != 21 {
				t.Errorf("stream usage %+v", c.Usage)
			}
			return err
		},
		"responses": func(ctx context.Context) error {
			_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")}})
			return adapter.Wrap(err)
		},
	}
	want := map[string]float64{
		"chat":      (93*2.5 + 1024*1.25 + 46*10) / 1e6,
		"stream":    (9*0.15 + 12*0.6) / 1e6,
		"responses": (36*2 + 87*8) / 1e6,
	}
	for id, call := range calls {
		for range 2 {
			if _, err := l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error { return call(ctx) }); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		st := l.Stats(id)
		if st.Costed != 2 || math.Abs(st.CostPerSuccess-want[id]) > 1e-12 || math.Abs(st.Cost-2*want[id]) > 1e-12 {
			t.Errorf("%s: costed %d, cost %g, per success %g; want 2 calls at %g", id, st.Costed, st.Cost, st.CostPerSuccess, want[id])
		}
	}
}

// TestWithPricesUnknownModel: a model missing from the table books no
// cost.
func TestWithPricesUnknownModel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatBody)
	}))
	defer srv.Close()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client := oai.NewClient(append(adapter.ClientOptions(nil), option.WithBaseURL(srv.URL), option.WithAPIKey("k"),
		adapter.WithPrices(price.Table{"gpt-4o-mini": {Input: 1, Output: 1}}))...)
	l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		return err
	})
	if st := l.Stats("a"); st.Costed != 0 {
		t.Errorf("costed %d calls of a model with no price", st.Costed)
	}
}
