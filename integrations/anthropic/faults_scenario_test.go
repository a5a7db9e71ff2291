package anthropic_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
)

// faultStream is Anthropic's message stream for the fault suite
// (docs/performance.md#faults): the events of stream_test.go, and a
// client that streams through the adapter (the loop's) or through
// anthropic-sdk-go alone (the baseline's, its retries off).
var faultStream = routesim.Stream{
	Start:     anthropicStream.Start,
	Token:     anthropicStream.Token,
	End:       anthropicStream.End,
	Malformed: "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"w5`,
	Client: func(rt http.RoundTripper, url, key string, viaAdapter bool) routesim.StreamCall {
		opts := []option.RequestOption{option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: rt})}
		if viaAdapter {
			opts = adapter.ClientOptions(rt)
		}
		c := ant.NewClient(append(opts, option.WithAPIKey(key), option.WithBaseURL(url+"/"))...)
		return func(ctx context.Context, model string) (string, error) {
			params := ant.MessageNewParams{Model: ant.Model(model), MaxTokens: 64, Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}
			var msg ant.Message
			var err error
			if viaAdapter {
				msg, err = adapter.Stream(ctx, &c, params, nil)
			} else {
				s := c.Messages.NewStreaming(ctx, params)
				for s.Next() {
					if aerr := msg.Accumulate(s.Current()); aerr != nil && err == nil {
						err = aerr
					}
				}
				if err == nil {
					err = s.Err()
				}
			}
			var text strings.Builder
			for _, b := range msg.Content {
				text.WriteString(b.Text)
			}
			return text.String(), err
		}
	},
}

// TestFaults runs issue 40's fault suite (docs/performance.md#faults)
// with anthropic-sdk-go, streaming and not; with SI_FAULT_TABLE set, it
// writes the table to that file.
func TestFaults(t *testing.T) {
	s := sdk
	s.Stream = faultStream
	routesim.RunFaults(t, s)
}
