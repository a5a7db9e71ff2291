// Command example runs anthropic-sdk-go under the selfimprove loop against a
// fake Anthropic server it starts itself (no API key needed): the model is
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

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const (
	oldModel = "claude-2.0"
	newModel = "claude-sonnet-4-5"
)

// fakeServer answers messages: oldModel is withdrawn after the
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
			io.WriteString(w, `{"type":"error","error":{"type":"not_found_error","message":"model: `+oldModel+`"}}`)
		case storm.Load() && stormN.Add(1)%2 == 1:
			w.Header().Set("retry-after", "1")
			w.Header().Set("anthropic-ratelimit-requests-remaining", "0")
			w.Header().Set("anthropic-ratelimit-requests-reset", time.Now().Add(time.Second).UTC().Format(time.RFC3339))
			w.WriteHeader(429)
			io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage."}}`)
		default:
			io.WriteString(w, `{"id":"msg_01","type":"message","role":"assistant","model":"`+req.Model+`","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
		}
	}))
}

func run(w io.Writer) error {
	var storm atomic.Bool
	srv := fakeServer(&storm)
	defer srv.Close()

	// The client: the SDK's retries off, requests through the loop's
	// transport.
	client := ant.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("sk-ant-demo"), option.WithBaseURL(srv.URL+"/"))...)
	routes := si.Routes{Primary: oldModel, Fallbacks: []string{newModel}}
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithRoutes(routes)) // the default config: retries come from the transient floor
	if err != nil {
		return err
	}
	defer loop.Close()

	chat := func(ctx context.Context, cfg si.Config) error {
		_, err := client.Messages.New(ctx, ant.MessageNewParams{Model: ant.Model(routes.Model(cfg)), MaxTokens: 64,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}})
		return adapter.Wrap(err)
	}
	ctx := context.Background()

	fmt.Fprintf(w, "model %s withdrawn after 5 requests:\n", oldModel)
	for i := 1; i <= 20; i++ {
		rep, err := loop.ExecuteWithImprovement(ctx, "writer", chat)
		switch {
		case rep.Improvement != nil:
			fmt.Fprintf(w, "  call %2d: %s; the loop moves the route to %q\n", i, failure.Classify(err), rep.Improvement.To.Route)
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
