package openai_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
)

// OpenAI's 400 invalid_request_error for an assistant message whose
// tool_calls lack tool messages is a bad request, sent once. Before, the
// words "tool_call_id" made it a tool_error, retried MaxAttempts times.
func TestToolCallIDBadRequestSentOnce(t *testing.T) {
	const body = `{"error":{"message":"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_abc","type":"invalid_request_error","param":"messages.[2].role","code":null}}`
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	client := oai.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("k"), option.WithBaseURL(srv.URL))...)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithDefaultConfig(si.Config{MaxAttempts: 3, Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.ExecuteWithImprovement(context.Background(), "agent", func(ctx context.Context, cfg si.Config) error {
		_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "gpt-4.1",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		return adapter.Wrap(err)
	})
	if c := failure.Classify(err); c != failure.ClassBadRequest || n.Load() != 1 {
		t.Errorf("class %s after %d requests, want bad_request after 1", c, n.Load())
	}
}

// A stream that said why it finished and sent the usage it was asked
// for, then lost its connection before "data: [DONE]", is complete: the
// answer is returned once. Before, it was interrupted and asked again.
func TestFinishedStreamThenReset(t *testing.T) {
	chunks := []string{
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`,
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}],"usage":null}`,
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`,
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, c := range chunks {
			io.WriteString(w, c+"\n\n")
		}
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // no terminating chunk, no [DONE]
		}
	}))
	defer srv.Close()
	client := oai.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("k"), option.WithBaseURL(srv.URL))...)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithDefaultConfig(si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var text string
	_, err = l.ExecuteWithImprovement(context.Background(), "agent", func(ctx context.Context, cfg si.Config) error {
		c, err := adapter.Stream(ctx, &client, oai.ChatCompletionNewParams{Model: "gpt-4.1",
			Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}}, nil)
		if len(c.Choices) > 0 {
			text = c.Choices[0].Message.Content
		}
		return err
	})
	if err != nil || n.Load() != 1 || text != "Hello" {
		t.Errorf("a finished answer (%q): err %v after %d requests, want nil after 1", text, err, n.Load())
	}
}
