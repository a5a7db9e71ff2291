// Command example runs openai-go under the selfimprove loop against a
// fake OpenAI server it starts itself (no API key needed): the model is
// withdrawn mid-run and the loop moves the agent to the fallback route;
// then a storm of 429s with Retry-After, which the loop honours.
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

	"github.com/self-improving-loop/selfimprove/failure"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
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

// fakeServer answers chat completions: oldModel is withdrawn after the
// first 5 requests; while storm is set, every other request gets a 429
// with retry-after: 1.
func fakeServer(storm *atomic.Bool) *httptest.Server {
	var n, stormN atomic.Int64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Model == oldModel && n.Add(1) > 5:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"The model `+"`"+oldModel+"`"+` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations","type":"invalid_request_error","param":null,"code":"model_not_found"}}`)
		case storm.Load() && stormN.Add(1)%2 == 1:
			w.Header().Set("retry-after", "1")
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "1s")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for `+newModel+` in organization org-demo on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		default:
			io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"`+req.Model+`","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		}
	}))
}

func run(w io.Writer) error {
	var storm atomic.Bool
	srv := fakeServer(&storm)
	defer srv.Close()

	// The client: the SDK's retries off, requests through the loop's
	// transport.
	client := oai.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("sk-demo"), option.WithBaseURL(srv.URL+"/v1/"))...)
	routes := si.Routes{Primary: oldModel, Fallbacks: []string{newModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes)) // the default config: retries come from the transient floor
	if err != nil {
		return err
	}
	defer loop.Close()

	chat := func(ctx context.Context, cfg si.Config) error {
		_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: routes.Model(cfg), Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		return adapter.Wrap(err)
	}
	ctx := context.Background()

	fmt.Fprintf(w, "model %s withdrawn after 5 requests:\n", oldModel)
	for i := 1; i <= 20; i++ {
		rep, err := loop.ExecuteWithImprovement(ctx, "writer", chat)
		switch {
		case rep.Improvement != nil:
			what := "answered by the fallback" // the call itself fell back within its attempts
			if err != nil {
				what = string(failure.Classify(err))
			}
			fmt.Fprintf(w, "  call %2d: %s; the loop moves the route to %q\n", i, what, rep.Improvement.To.Route)
		case err != nil:
			fmt.Fprintf(w, "  call %2d: %s after %d attempt(s): %v\n", i, failure.Classify(err), rep.Attempts, err)
		}
	}
	fmt.Fprintf(w, "  route now %q\n", loop.Config("writer").Route)

	fmt.Fprintln(w, "429 storm with retry-after: 1:")
	storm.Store(true)
	for i := 1; i <= 2; i++ {
		start := time.Now()
		var waited []string
		rep, err := loop.ExecuteWithImprovement(ctx, "writer", func(ctx context.Context, cfg si.Config) error {
			if a, ok := si.AttemptInfo(ctx); ok {
				waited = append(waited, fmt.Sprintf("attempt %d after a %d, waited %v (%s)", a.Number, a.LastStatus, a.Waited, a.WaitReason))
			}
			return chat(ctx, cfg)
		})
		fmt.Fprintf(w, "  call %d: success %v, %d attempts in %v: %v\n", i, err == nil, rep.Attempts, time.Since(start).Round(100*time.Millisecond), waited)
	}
	return nil
}
