package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
	"github.com/self-improving-loop/selfimprove/stream"
)

// OpenAI's chat completion stream, as the API sends it: "data: {chunk}"
// events, then "data: [DONE]".
const chunkHead = `{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_1","choices":[`

var openaiStream = streamtest.Provider{
	Start: []string{`data: ` + chunkHead + `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`},
	Token: func(text string) string {
		return fmt.Sprintf(`data: %s{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`, chunkHead, text)
	},
	End: []string{`data: ` + chunkHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`, `data: [DONE]`},
	// A server error inside the 200 stream.
	Error:      `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	ErrorClass: failure.ClassOverloaded,
	Call: func(ctx context.Context, url string, onToken func()) (string, error) {
		c := oai.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("sk-test"), option.WithBaseURL(url+"/v1/"))...)
		params := oai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}
		out, err := adapter.Stream(ctx, &c, params, func(ch oai.ChatCompletionChunk) {
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				onToken()
			}
		})
		if len(out.Choices) == 0 {
			return "", err
		}
		return out.Choices[0].Message.Content, err
	},
}

func TestStream(t *testing.T) { streamtest.Run(t, openaiStream) }

// A stream that said why it finished is complete without "data: [DONE]",
// but not when the request asked for the usage and none came: the usage
// chunk comes last, after the finish_reason.
func TestStreamCompleteWithoutDone(t *testing.T) {
	finish := `data: ` + chunkHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`
	usage := `data: {"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`
	for _, tc := range []struct {
		name   string
		events []string
		usage  bool
		ok     bool
	}{
		{"finish reason", []string{finish}, false, true},
		{"finish reason, usage asked and sent", []string{finish, usage}, true, true},
		{"finish reason, usage asked and not sent", []string{finish}, true, false},
		{"no finish reason", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range append(append(append([]string{}, openaiStream.Start...), openaiStream.Token("Hello")), tc.events...) {
					fmt.Fprintf(w, "%s\n\n", ev)
				}
			}))
			defer srv.Close()
			c := oai.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("sk-test"), option.WithBaseURL(srv.URL+"/v1/"))...)
			params := oai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}
			if tc.usage {
				params.StreamOptions.IncludeUsage = oai.Bool(true)
			}
			out, err := adapter.Stream(context.Background(), &c, params, nil)
			if tc.ok != (err == nil) || tc.ok && out.Choices[0].Message.Content != "Hello" {
				t.Errorf("err %v: want complete %v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, stream.ErrTruncated) {
				t.Errorf("err %v, want stream.ErrTruncated", err)
			}
		})
	}
}
