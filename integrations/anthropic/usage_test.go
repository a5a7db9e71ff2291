package anthropic_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/price"
)

// Bodies as the Anthropic API sends them (the API reference's examples).
const (
	messageBody   = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"output_tokens":503}}`
	messageStream = "event: message_start\n" +
		`data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}` + "\n\n" +
		"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type": "content_block_stop", "index": 0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type": "message_stop"}` + "\n\n"
)

// TestWithPricesBooksTokenCosts: with WithPrices, a message and a
// streamed message each book their tokens' price as the call's cost, by
// the model the response names, cache reads at their price.
func TestWithPricesBooksTokenCosts(t *testing.T) {
	if looptest.FreshProcess(t) { // with no start-up call: the first call's cost is booked
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			io.WriteString(w, messageStream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, messageBody)
	}))
	defer srv.Close()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	prices := price.Table{"claude-3-5-haiku": {Input: 0.8, Output: 4, CachedInput: 0.08}, "claude-sonnet-4-5": {Input: 3, Output: 15, CachedInput: 0.3}}
	client := ant.NewClient(append(adapter.ClientOptions(nil), option.WithBaseURL(srv.URL), option.WithAPIKey("k"), adapter.WithPrices(prices))...)
	params := ant.MessageNewParams{Model: "claude-3-5-haiku-latest", MaxTokens: 64, Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}
	calls := map[string]func(ctx context.Context) error{
		"message": func(ctx context.Context) error {
			_, err := client.Messages.New(ctx, params)
			return adapter.Wrap(err)
		},
		"stream": func(ctx context.Context) error {
			m, err := adapter.Stream(ctx, &client, params, nil)
			if err == nil && m.Usage.OutputTokens != 15 {
				t.Errorf("stream usage %+v", m.Usage)
			}
			return err
		},
	}
	want := map[string]float64{"message": (2095*0.8 + 1800*0.08 + 503*4) / 1e6, "stream": (25*3 + 15*15) / 1e6}
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
