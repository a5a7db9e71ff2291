package eino_test

import (
	"context"
	"net/http"
	"time"

	"testing"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// The route scenarios of docs/performance.md#routes (a withdrawn model
// moved to the fallback and back, 429 storms, outages) with Eino's real
// OpenAI model, each attempt made by adapter.Generate as Model makes it,
// against a local server that answers with OpenAI's bodies and headers;
// internal/routesim runs them.
var sdk = routesim.SDK{
	Ladder:      si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}},
	Withdrawn:   "gpt-4-0314",
	ServerError: "503",
	Client: func(rt http.RoundTripper, url, _ string) routesim.Call {
		m := chatModel(url, rt)
		return func(ctx context.Context, model string) error {
			_, err := adapter.Generate(ctx, m, model, hi)
			return err
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
	}
	return routesim.Reply{Status: r.status, Header: r.headers, Body: r.body}
}

// TestScenarios runs the route scenarios, each a subtest, and logs their
// table.
func TestScenarios(t *testing.T) { routesim.Run(t, sdk) }
