// Command example runs an Eino ChatModelAgent on Eino's OpenAI model
// under the selfimprove loop, against a fake OpenAI server it starts
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

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaidemo"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// ask runs the agent on q and returns its last answer.
func ask(ctx context.Context, r *adk.Runner, q string) (string, error) {
	it := r.Query(ctx, q)
	answer := ""
	for {
		ev, ok := it.Next()
		if !ok {
			return answer, nil
		}
		if ev.Err != nil {
			return "", ev.Err
		}
		if ev.Output != nil && ev.Output.MessageOutput != nil {
			m, err := ev.Output.MessageOutput.GetMessage()
			if err != nil {
				return "", err
			}
			answer = m.Content
		}
	}
}

func run(w io.Writer) error {
	srv := oaidemo.NewServer()
	defer srv.Close()
	ctx := context.Background()

	routes := si.Routes{Primary: oaidemo.OldModel, Fallbacks: []string{oaidemo.NewModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	if err != nil {
		return err
	}
	defer loop.Close()

	// Eino's OpenAI model, with the adapter's HTTP client so that the
	// loop sees each error's status, code and Retry-After.
	inner, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{APIKey: "sk-demo", BaseURL: srv.URL + "/v1", Model: oaidemo.NewModel,
		HTTPClient: adapter.HTTPClient(nil)})
	if err != nil {
		return err
	}
	model, err := adapter.New(loop, inner, adapter.Options{AgentID: "writer", Routes: routes,
		Check: func(m *schema.Message) error {
			var v struct{ Answer int }
			return json.Unmarshal([]byte(m.Content), &v)
		}})
	if err != nil {
		return err
	}
	// The agent, with Eino's own retries off (ModelRetryConfig nil).
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "writer", Description: "answers in JSON",
		Instruction: "Reply in JSON.", Model: model})
	if err != nil {
		return err
	}
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent})

	srv.Script(w, "run", func() (string, error) { return ask(ctx, runner, "What is the answer?") }, func() string { return loop.Config("writer").Route })
	return nil
}
