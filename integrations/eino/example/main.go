// Command example runs an Eino ChatModelAgent on Eino's OpenAI model
// under the selfimprove loop, against a fake OpenAI server it starts
// itself (no API key needed): the model is withdrawn mid-run and the loop
// moves the agent to the fallback; a 429 with retry-after: 1 is waited;
// an answer that is not the JSON asked for is retried.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const (
	oldModel = "gpt-4-0314"
	newModel = "gpt-4o"
)

// fakeServer answers chat completions as OpenAI does: oldModel is
// withdrawn after 5 requests; the request after storm is set gets a 429
// with retry-after: 1; the request after bad is set gets broken JSON.
func fakeServer(storm, bad *atomic.Bool) *httptest.Server {
	var n atomic.Int64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		content := `{\"answer\": 42}`
		switch {
		case req.Model == oldModel && n.Add(1) > 5:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"The model `+"`"+oldModel+"`"+` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations","type":"invalid_request_error","param":null,"code":"model_not_found"}}`)
			return
		case storm.CompareAndSwap(true, false):
			w.Header().Set("retry-after", "1")
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for `+newModel+` in organization org-demo on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
			return
		case bad.CompareAndSwap(true, false):
			content = `{\"answer\": 4`
		}
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"`+req.Model+`","choices":[{"index":0,"message":{"role":"assistant","content":"`+content+`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
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
	var storm, bad atomic.Bool
	srv := fakeServer(&storm, &bad)
	defer srv.Close()
	ctx := context.Background()

	routes := si.Routes{Primary: oldModel, Fallbacks: []string{newModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	if err != nil {
		return err
	}
	defer loop.Close()

	// Eino's OpenAI model, with the adapter's HTTP client so that the
	// loop sees each error's status, code and Retry-After.
	inner, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{APIKey: "sk-demo", BaseURL: srv.URL + "/v1", Model: newModel,
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

	fmt.Fprintf(w, "model %s withdrawn after 5 requests:\n", oldModel)
	for i := 1; i <= 10; i++ {
		if _, err := ask(ctx, runner, "What is the answer?"); err != nil {
			fmt.Fprintf(w, "  run %2d: %v\n", i, err)
		}
	}
	fmt.Fprintf(w, "  route now %q; every run succeeded\n", loop.Config("writer").Route)

	for _, c := range []struct {
		what string
		flag *atomic.Bool
	}{{"a 429 with retry-after: 1", &storm}, {"an answer that is not JSON", &bad}} {
		c.flag.Store(true)
		start := time.Now()
		answer, err := ask(ctx, runner, "What is the answer?")
		fmt.Fprintf(w, "%s: %q, error %v, after %v\n", c.what, answer, err, time.Since(start).Round(time.Second))
	}
	return nil
}
