package anthropic_test

import (
	"context"
	"errors"
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
var sim = routesim.New(routesim.SDK{
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
	Response: func(err error) *http.Response {
		var ae *ant.Error
		if errors.As(err, &ae) {
			return ae.Response
		}
		return nil
	},
})

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
	}
	return routesim.Reply{Status: r.status, Header: r.headers, Body: r.body}
}

// The primary answers 529 overloaded_error for 30 minutes while the
// fallback is healthy.
func TestScenarioOverloadedPrimary(t *testing.T) { sim.OverloadedPrimary(t) }

// The primary is withdrawn (404 not_found_error); the fallback answers
// 500 api_error for its first 5 minutes.
func TestScenarioWithdrawnPrimary(t *testing.T) { sim.WithdrawnPrimary(t) }

// Four agents of one account run out of credit (400 "credit balance is
// too low") for 24 hours.
func TestScenarioQuotaExhausted(t *testing.T) { sim.QuotaExhausted(t) }

// The primary slows from 2 s to 8 s for 2 hours, under a 5 s timeout.
func TestScenarioSlowPrimary(t *testing.T) { sim.SlowPrimary(t) }

// For an hour, 40 % of calls meet a rate limit: a 429 rate_limit_error
// with retry-after: 2, and 429s until those 2 seconds have passed.
func TestScenario429Storm(t *testing.T) { sim.RateLimitStorm(t) }

// A healthy agent with 2 % random 500 api_errors for 3 days makes no
// route change.
func TestScenarioHealthyNoise(t *testing.T) { sim.HealthyNoise(t) }

// TestZRouteTable prints the side-by-side table of the scenarios that ran
// (docs/performance.md#routes); with SI_ROUTE_TABLE set, it writes it to
// that file as well.
func TestZRouteTable(t *testing.T) { sim.Table(t) }
