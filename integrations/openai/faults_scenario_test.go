package openai_test

import (
	"context"
	"net/http"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// faultStream is OpenAI's chat completion stream for the fault suite
// (docs/performance.md#faults): the events of stream_test.go, and a
// client that streams through the adapter (the loop's) or through
// openai-go alone (the baseline's, its retries off).
var faultStream = routesim.Stream{
	Start:     openaiStream.Start,
	Token:     openaiStream.Token,
	End:       openaiStream.End,
	Malformed: `data: ` + chunkHead + `{"index":0,"delta":{"content":"w5`,
	Client: func(rt http.RoundTripper, url, key string, viaAdapter bool) routesim.StreamCall {
		opts := []option.RequestOption{option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: rt})}
		if viaAdapter {
			opts = adapter.ClientOptions(rt)
		}
		c := oai.NewClient(append(opts, option.WithAPIKey(key), option.WithBaseURL(url+"/v1/"))...)
		return func(ctx context.Context, model string) (string, error) {
			params := oai.ChatCompletionNewParams{Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}
			var acc oai.ChatCompletionAccumulator
			var err error
			if viaAdapter {
				acc.ChatCompletion, err = adapter.Stream(ctx, &c, params, nil)
			} else {
				s := c.Chat.Completions.NewStreaming(ctx, params)
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				err = s.Err()
			}
			if len(acc.Choices) == 0 {
				return "", err
			}
			return acc.Choices[0].Message.Content, err
		}
	},
}

// TestFaults runs issue 40's fault suite (docs/performance.md#faults)
// with openai-go, streaming and not; with SI_FAULT_TABLE set, it writes
// the table to that file.
func TestFaults(t *testing.T) {
	s := sdk
	s.Stream = faultStream
	routesim.RunFaults(t, s)
}
