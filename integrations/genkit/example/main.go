// Command example runs genkit.Generate with Genkit's OpenAI-compatible
// plugin under the selfimprove loop (the adapter's middleware), against a fake OpenAI server it starts
// itself (no API key needed): the model is withdrawn mid-run and the loop
// moves the agent to the fallback; a 429 with retry-after: 1 is waited;
// an answer that is not the JSON asked for is retried.
package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaidemo"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// provider names the models of Genkit's OpenAI-compatible plugin.
const provider = "openai/"

func run(w io.Writer) error {
	srv := oaidemo.NewServer()
	defer srv.Close()
	ctx := context.Background()

	routes := si.Routes{Primary: provider + oaidemo.OldModel, Fallbacks: []string{provider + oaidemo.NewModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	if err != nil {
		return err
	}
	defer loop.Close()

	// Genkit's OpenAI-compatible plugin, with the adapter's client
	// options: openai-go's own retries off, each stream watched for its
	// end.
	g := genkit.Init(ctx, genkit.WithPlugins(&compat_oai.OpenAICompatible{Provider: "openai", APIKey: "sk-demo", BaseURL: srv.URL + "/v1",
		Opts: adapter.ClientOptions(nil)}))
	mw, err := adapter.Middleware(loop, adapter.Options{AgentID: "writer", Routes: routes, Genkit: g,
		Check: func(r *ai.ModelResponse) error {
			var v struct{ Answer int }
			return json.Unmarshal([]byte(r.Text()), &v)
		}})
	if err != nil {
		return err
	}
	ask := func() (string, error) {
		resp, err := genkit.Generate(ctx, g, ai.WithModelName(provider+oaidemo.OldModel), ai.WithPrompt("What is the answer? Reply in JSON."), ai.WithUse(mw))
		if err != nil {
			return "", err
		}
		return resp.Text(), nil
	}

	srv.Script(w, "call", ask, func() string { return loop.Config("writer").Route })
	return nil
}
