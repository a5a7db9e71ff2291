package openai_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
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
// chunk comes last, after the finish_reason. With n > 1 the choices
// stream side by side, and every one must have finished: before, the
// first finish_reason made the stream complete, and an n=2 stream cut
// while choice 1 was still being written returned nil.
func TestStreamCompleteWithoutDone(t *testing.T) {
	finish := `data: ` + chunkHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`
	second := `data: ` + chunkHead + `{"index":1,"delta":{"content":"A longer answer"},"logprobs":null,"finish_reason":null}]}`
	finish2 := `data: ` + chunkHead + `{"index":1,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`
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
		{"two choices, the second cut short", []string{second, finish, second}, false, false},
		{"two choices, both finished", []string{second, finish, finish2}, false, true},
		{"two choices, both finished in one chunk", []string{second, `data: ` + chunkHead +
			`{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"length"}]}`}, false, true},
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

// pipeRT answers each request with a 200 event stream that a goroutine
// writes: events, each after gap (fake time inside a synctest bubble),
// until the client closes the body or, as net/http's transport does,
// the request's context ends.
type pipeRT struct {
	events   []string
	gap      time.Duration
	requests atomic.Int32
}

func (p *pipeRT) RoundTrip(req *http.Request) (*http.Response, error) {
	p.requests.Add(1)
	pr, pw := io.Pipe()
	go func() {
		for i, ev := range p.events {
			if i > 0 {
				select {
				case <-req.Context().Done():
					pw.CloseWithError(context.Cause(req.Context()))
					return
				case <-time.After(p.gap):
				}
			}
			if _, err := io.WriteString(pw, ev+"\n\n"); err != nil {
				return // the client closed the body
			}
		}
		pw.Close()
	}()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: pr, Request: req}, nil
}

// A chunk that carries a legacy function call (the functions parameter's
// answer, delta.function_call) or audio is a piece of the answer, like
// content, a refusal or a tool call: it is the first token. Before, only
// the last three were: a function call streamed a chunk every 100 ms was
// cut at a FirstTokenTimeout of 250 ms as a stall, three times.
func TestStreamFirstTokenOfEveryKind(t *testing.T) {
	const start = `{"role":"assistant","content":null,"refusal":null}`
	for _, tc := range []struct {
		name   string
		deltas []string
	}{
		{"function call", []string{`{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":""},"refusal":null}`,
			`{"function_call":{"arguments":"{\"city\":"}}`, `{"function_call":{"arguments":"\"Paris\"}"}}`}},
		{"function call arguments only", []string{start, `{"function_call":{"arguments":"{\"city\":"}}`, `{"function_call":{"arguments":"\"Paris\"}"}}`}},
		{"tool call", []string{start, `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`,
			`{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}`}},
		{"audio", []string{start, `{"audio":{"id":"audio_1","transcript":"It is"}}`, `{"audio":{"transcript":" sunny."}}`}},
		{"content", []string{start, `{"content":"It is"}`, `{"content":" sunny."}`}},
		{"refusal", []string{start, `{"refusal":"I can't"}`, `{"refusal":" say."}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var events []string
				for _, d := range tc.deltas {
					events = append(events, `data: `+chunkHead+`{"index":0,"delta":`+d+`,"logprobs":null,"finish_reason":null}]}`)
				}
				// the rest of the answer, a chunk every 100 ms, well past the first-token deadline
				for range 5 {
					events = append(events, events[len(events)-1])
				}
				events = append(events, `data: `+chunkHead+`{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`, `data: [DONE]`)
				rt := &pipeRT{events: events, gap: 100 * time.Millisecond}
				c := oai.NewClient(append(adapter.ClientOptions(rt), option.WithAPIKey("sk-test"), option.WithBaseURL("http://openai.test/v1/"))...)
				l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 250 * time.Millisecond}))
				defer l.Close()
				params := oai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("weather in Paris?")}}
				rep, err := l.ExecuteWithImprovement(context.Background(), "agent", func(ctx context.Context, _ si.Config) error {
					_, err := adapter.Stream(ctx, &c, params, nil)
					return err
				})
				if err != nil || rep.Attempts != 1 || rt.requests.Load() != 1 {
					t.Errorf("err %v after %d attempts, %d requests; want nil after 1", err, rep.Attempts, rt.requests.Load())
				}
			})
		})
	}
}
