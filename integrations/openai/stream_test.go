package openai_test

import (
	"context"
	"fmt"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
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
