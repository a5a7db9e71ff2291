package price_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/price"
)

// Transport books the token usage of each answer of an OpenAI-compatible
// API as the cost of the call that asked for it: here a chat completion
// of 1,000 input tokens (400 of them cached) and 200 output tokens.
func ExampleTransport() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1741570283,"model":"gpt-4o-mini-2024-07-18",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":1000,"completion_tokens":200,"total_tokens":1200,"prompt_tokens_details":{"cached_tokens":400}}}`)
	}))
	defer api.Close()

	prices := price.Table{"gpt-4o-mini": {Input: 0.15, Output: 0.60, CachedInput: 0.075}} // dollars per million tokens
	// The HTTP client of the SDK or framework (eino's or langchaingo's
	// HTTPClient(base), genkit's ClientOptions(base)).
	client := &http.Client{Transport: price.Transport(nil, prices)}

	loop, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithStrategy(nil),
		selfimprove.WithNotifier(nil), selfimprove.WithLogger(slog.New(slog.DiscardHandler)))
	defer loop.Close()
	loop.ExecuteWithImprovement(context.Background(), "assistant", func(ctx context.Context, _ selfimprove.Config) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`))
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, err = io.ReadAll(res.Body) // the SDK reads the answer: its cost is booked
		return err
	})
	st := loop.Stats("assistant")
	fmt.Printf("%d call costed, $%.6f per successful call\n", st.Costed, st.CostPerSuccess)
	// Output: 1 call costed, $0.000240 per successful call
}
