package anthropic_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// The route scenarios of docs/performance.md#routes with the real
// anthropic-sdk-go client (internal/routesim runs them), against a local
// server that answers with Anthropic's bodies and headers.
var sdk = routesim.SDK{
	Ladder:      si.Routes{Primary: adapter.DefaultPrimary, Fallbacks: adapter.DefaultFallbacks[:1]},
	Withdrawn:   "claude-3-sonnet-20240229",
	ServerError: "500",
	Client: func(rt http.RoundTripper, url, key string) routesim.Call {
		c := ant.NewClient(append(adapter.ClientOptions(rt), option.WithAPIKey(key), option.WithBaseURL(url+"/"))...)
		return func(ctx context.Context, model string) error {
			return adapter.Wrap(chat(ctx, c, model))
		}
	},
	Reply: simReply,
}

// simReply is Anthropic's answer of kind k at simulated time now, as the
// API sends it; each carries a request-id header.
func simReply(k routesim.Kind, model string, now time.Time) routesim.Reply {
	var r reply
	switch k {
	case routesim.OK:
		r = reply{200, map[string]string{"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}, okBody}
	case routesim.Overloaded:
		r = apiErr(529, "overloaded_error", "Overloaded", nil)
	case routesim.ServerError:
		r = apiErr(500, "api_error", "Internal server error", nil)
	case routesim.Withdrawn:
		r = apiErr(404, "not_found_error", "model: "+model, nil)
	case routesim.NoQuota:
		r = apiErr(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", nil)
	case routesim.RateLimited:
		r = apiErr(429, "rate_limit_error", "This request would exceed the rate limit for your organization (4f2a5c0e-7b1d-4e8a-9c3f-2d6b8e1a0f57) of 50 requests per minute. For details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
			map[string]string{"retry-after": "2", "anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": now.Add(2 * time.Second).UTC().Format(time.RFC3339)})
	case routesim.RateLimitedNoWait:
		r = apiErr(429, "rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute.", nil)
	case routesim.ContextLength:
		r = apiErr(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum", nil)
	case routesim.ContentFilter:
		r = apiErr(400, "invalid_request_error", "Output blocked by content filtering policy", nil)
	case routesim.PrefillRefused:
		r = apiErr(400, "invalid_request_error", "This model does not support assistant message prefill. The conversation must end with a user message.", nil)
	}
	return routesim.Reply{Status: r.status, Header: r.headers, Body: r.body}
}

// TestScenarios runs the route scenarios (docs/performance.md#routes),
// each a subtest, and logs their table; with SI_ROUTE_TABLE set, it
// writes the table to that file as well.
func TestScenarios(t *testing.T) { routesim.Run(t, sdk) }
