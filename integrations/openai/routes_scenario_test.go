package openai_test

import (
	"context"
	"errors"
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
var sim = routesim.New(routesim.SDK{
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
	Response: func(err error) *http.Response {
		var ae *oai.Error
		if errors.As(err, &ae) {
			return ae.Response
		}
		return nil
	},
})

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

// The primary answers 503 for 30 minutes while the fallback is healthy.
func TestScenarioOverloadedPrimary(t *testing.T) { sim.OverloadedPrimary(t) }

// The primary is withdrawn; the fallback answers 503 for its first 5
// minutes.
func TestScenarioWithdrawnPrimary(t *testing.T) { sim.WithdrawnPrimary(t) }

// Four agents of one account run out of quota for 24 hours.
func TestScenarioQuotaExhausted(t *testing.T) { sim.QuotaExhausted(t) }

// The primary slows from 2 s to 8 s for 2 hours, under a 5 s timeout.
func TestScenarioSlowPrimary(t *testing.T) { sim.SlowPrimary(t) }

// For an hour, 40 % of calls meet a rate limit: a 429 with retry-after: 2,
// and 429s until those 2 seconds have passed.
func TestScenario429Storm(t *testing.T) { sim.RateLimitStorm(t) }

// A healthy agent with 2 % random 503s for 3 days makes no route change.
func TestScenarioHealthyNoise(t *testing.T) { sim.HealthyNoise(t) }

// TestZRouteTable prints the side-by-side table of the scenarios that ran
// (docs/performance.md#routes); with SI_ROUTE_TABLE set, it writes it to
// that file as well.
func TestZRouteTable(t *testing.T) { sim.Table(t) }
