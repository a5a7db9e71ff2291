package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	siopenai "github.com/self-improving-loop/selfimprove/integrations/openai"
)

// A streamed answer under the loop: Stream reports the first token, so
// that the config's FirstTokenTimeout cuts an attempt whose stream stalls
// before it (and the loop retries it), while a long answer that began in
// time runs to its end; a stream cut short is a failure, not a short
// answer.
func ExampleStream() {
	// A local server that streams as OpenAI does: no API key needed.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,`
		for _, ev := range []string{
			head + `"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			head + `"delta":{"content":"Hello"},"finish_reason":null}]}`,
			head + `"delta":{"content":", world"},"finish_reason":null}]}`,
			head + `"delta":{},"finish_reason":"stop"}]}`,
			"[DONE]",
		} {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		}
	}))
	defer srv.Close()

	client := oai.NewClient(append(siopenai.ClientOptions(nil), option.WithAPIKey("sk-example"), option.WithBaseURL(srv.URL+"/v1/"))...)
	loop, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil),
		si.WithDefaultConfig(si.Config{MaxAttempts: 3, Timeout: 2 * time.Minute, FirstTokenTimeout: 10 * time.Second}))
	if err != nil {
		panic(err)
	}
	defer loop.Close()

	params := oai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Say hello.")}}
	var answer oai.ChatCompletion
	rep, err := loop.ExecuteWithImprovement(context.Background(), "writer", func(ctx context.Context, cfg si.Config) error {
		var err error
		answer, err = siopenai.Stream(ctx, &client, params, func(c oai.ChatCompletionChunk) {
			// Forward each piece to the user as it arrives.
		})
		return err
	})
	v, _ := loop.View("writer")
	fmt.Printf("%q after %d attempt(s), err %v; first tokens measured: %d\n", answer.Choices[0].Message.Content, rep.Attempts, err, v.FirstToken.Count)
	// Output: "Hello, world" after 1 attempt(s), err <nil>; first tokens measured: 1
}
