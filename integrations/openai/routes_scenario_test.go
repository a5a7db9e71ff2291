package openai_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// The route scenarios of docs/performance.md#routes with the real
// openai-go client (internal/routesim runs them), against a local server
// that answers with OpenAI's bodies and headers.
var sdk = routesim.SDK{
	Ladder:      si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}},
	Withdrawn:   "gpt-4-0314",
	ServerError: "503",
	Client: func(rt http.RoundTripper, url, key string) routesim.Call {
		c := oai.NewClient(append(adapter.ClientOptions(rt), option.WithAPIKey(key), option.WithBaseURL(url+"/v1/"))...)
		return func(ctx context.Context, model string) error {
			_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
			return adapter.Wrap(err)
		}
	},
	Reply: simReply,
}

// simReply is OpenAI's answer of kind k, as the API sends it.
func simReply(k routesim.Kind, model string, _ time.Time) routesim.Reply {
	var r reply
	switch k {
	case routesim.OK:
		r = ok
	case routesim.Overloaded, routesim.ServerError:
		r = apiErr(503, "server_error", "", "The server is overloaded or not ready yet.", nil)
	case routesim.Withdrawn:
		r = apiErr(404, "invalid_request_error", "model_not_found", "The model `"+model+"` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations", nil)
	case routesim.NoQuota:
		r = apiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", nil)
	case routesim.RateLimited:
		r = apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for "+model+" in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 2s.",
			map[string]string{"retry-after": "2", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"})
	case routesim.RateLimitedNoWait:
		r = apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for "+model+" in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.", nil)
	case routesim.ContextLength:
		r = apiErr(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130567 tokens. Please reduce the length of the messages.", nil)
	case routesim.ContentFilter:
		r = apiErr(400, "invalid_request_error", "content_filter", "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.", nil)
	case routesim.PrefillRefused:
		r = apiErr(400, "invalid_request_error", "", "This model does not support assistant message prefill. The conversation must end with a user message.", nil)
	}
	return routesim.Reply{Status: r.status, Header: r.headers, Body: r.body}
}

// TestScenarios runs the route scenarios (docs/performance.md#routes),
// each a subtest, and logs their table; with SI_ROUTE_TABLE set, it
// writes the table to that file as well.
func TestScenarios(t *testing.T) { routesim.Run(t, sdk) }
