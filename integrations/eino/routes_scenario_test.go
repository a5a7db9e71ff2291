package eino_test

import (
	"context"
	"net/http"

	"testing"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
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
	Reply: oaifake.SimReply,
}

// TestScenarios runs the route scenarios, each a subtest, and logs their
// table.
func TestScenarios(t *testing.T) { routesim.Run(t, sdk) }
