package anthropic_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
)

func reviewLoop(t *testing.T, cfg si.Config) *si.Loop {
	t.Helper()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler)),
		si.WithDefaultConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A 400 invalid_request_error about unanswered tool_use blocks, and a
// 413 request_too_large, cannot succeed on a retry: each is sent once.
// Before, the first was a tool_error and the second "other", each sent 3
// times.
func TestDeterministicRefusalsSentOnce(t *testing.T) {
	for name, c := range map[string]struct {
		status int
		body   string
	}{
		"400 tool_use without tool_result": {400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.2: ` + "`tool_use`" + ` ids were found without ` + "`tool_result`" + ` blocks immediately after: toolu_01ABC. Each ` + "`tool_use`" + ` block must have a corresponding ` + "`tool_result`" + ` block in the next message."},"request_id":"req_011"}`},
		"413 request_too_large":            {413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."},"request_id":"req_011"}`},
	} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				n.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			client := ant.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("k"), option.WithBaseURL(srv.URL))...)
			l := reviewLoop(t, si.Config{MaxAttempts: 3, Timeout: 10 * time.Second})
			_, err := l.ExecuteWithImprovement(context.Background(), "agent", func(ctx context.Context, cfg si.Config) error {
				_, err := client.Messages.New(ctx, ant.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 100,
					Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}})
				return adapter.Wrap(err)
			})
			if err == nil || n.Load() != 1 {
				t.Errorf("%d requests for a permanent %d (err %v), want 1", n.Load(), c.status, err)
			}
		})
	}
}

// The whole message, message_stop included, then the connection cut
// before the chunked body's end: the answer is complete and returned
// once. Before, Stream reported it interrupted and the loop asked again.
func TestCompleteStreamThenReset(t *testing.T) {
	events := []string{
		"event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`,
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}`,
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`,
		"event: message_stop\n" + `data: {"type":"message_stop"}`,
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, ev := range events {
			io.WriteString(w, ev+"\n\n")
		}
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // no terminating chunk
		}
	}))
	defer srv.Close()
	client := ant.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("k"), option.WithBaseURL(srv.URL))...)
	l := reviewLoop(t, si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 5 * time.Second})
	var text string
	_, err := l.ExecuteWithImprovement(context.Background(), "agent", func(ctx context.Context, cfg si.Config) error {
		msg, err := adapter.Stream(ctx, &client, ant.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}, nil)
		var b strings.Builder
		for _, c := range msg.Content {
			b.WriteString(c.Text)
		}
		text = b.String()
		return err
	})
	if err != nil || n.Load() != 1 || text != "Hello" {
		t.Errorf("a complete answer (%q): err %v after %d requests, want nil after 1", text, err, n.Load())
	}
}
