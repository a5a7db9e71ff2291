// Command example runs langchaingo's OpenAI client under the selfimprove
// loop against a fake OpenAI server it starts itself (no API key
// needed): the model is withdrawn mid-run and the loop moves the agent to
// the fallback; a 429 with retry-after: 1 is waited; an answer that is not
// the JSON asked for is retried.
package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"os"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaidemo"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	srv := oaidemo.NewServer()
	defer srv.Close()

	routes := si.Routes{Primary: oaidemo.OldModel, Fallbacks: []string{oaidemo.NewModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	if err != nil {
		return err
	}
	defer loop.Close()

	// langchaingo's client, with the adapter's HTTP client so that the
	// loop sees each error's status, code and Retry-After.
	inner, err := openai.New(openai.WithToken("sk-demo"), openai.WithBaseURL(srv.URL+"/v1"), openai.WithHTTPClient(adapter.HTTPClient(nil)))
	if err != nil {
		return err
	}
	model, err := adapter.New(loop, inner, adapter.Options{AgentID: "writer", Routes: routes,
		Check: func(r *llms.ContentResponse) error {
			var v struct{ Answer int }
			return json.Unmarshal([]byte(r.Choices[0].Content), &v)
		}})
	if err != nil {
		return err
	}
	ctx := context.Background()

	srv.Script(w, "call", func() (string, error) { return model.Call(ctx, "What is the answer? Reply in JSON.") }, func() string { return loop.Config("writer").Route })
	return nil
}
