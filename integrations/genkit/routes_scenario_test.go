package genkit_test

import (
	"context"
	"net/http"

	"testing"

	"github.com/firebase/genkit/go/plugins/compat_oai"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// The route scenarios of docs/performance.md#routes (a withdrawn model
// moved to the fallback and back, 429 storms, outages) with the model
// function of Genkit's OpenAI-compatible plugin (its ModelGenerator, which
// its model action runs, without the action's tracing and schema checks,
// too slow under -race for hours of simulated traffic), each attempt made
// by adapter.Generate as the middleware makes it,
// against a local server that answers with OpenAI's bodies and headers;
// internal/routesim runs them.
var sdk = routesim.SDK{
	Ladder:      si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}},
	Withdrawn:   "gpt-4-0314",
	ServerError: "503",
	Client: func(rt http.RoundTripper, url, key string) routesim.Call {
		c := openai.NewClient(append(adapter.ClientOptions(rt), option.WithAPIKey(key), option.WithBaseURL(url+"/v1"))...)
		return func(ctx context.Context, model string) error {
			gen := compat_oai.NewModelGenerator(&c, model).WithMessages(req.Messages)
			_, err := adapter.Generate(ctx, gen.Generate, req, nil)
			return err
		}
	},
	Reply: oaifake.SimReply,
}

// TestScenarios runs the route scenarios, each a subtest, and logs their
// table.
func TestScenarios(t *testing.T) { routesim.Run(t, sdk) }
