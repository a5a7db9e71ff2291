package anthropic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
)

// Anthropic's message stream, as the API sends it: named events, a ping
// among them, message_stop last.
var anthropicStream = streamtest.Provider{
	Start: []string{
		"event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`,
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"event: ping\n" + `data: {"type": "ping"}`,
	},
	Token: func(text string) string {
		return fmt.Sprintf("event: content_block_delta\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, text)
	},
	End: []string{
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}`,
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`,
		"event: message_stop\n" + `data: {"type":"message_stop"}`,
	},
	Error:      "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	ErrorClass: failure.ClassOverloaded,
	Call: func(ctx context.Context, url string, onToken func()) (string, error) {
		c := ant.NewClient(append(adapter.ClientOptions(nil), option.WithAPIKey("sk-ant-test"), option.WithBaseURL(url))...)
		params := ant.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64, Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}
		msg, err := adapter.Stream(ctx, &c, params, func(ev ant.MessageStreamEventUnion) {
			if ev.Type == "content_block_delta" {
				onToken()
			}
		})
		var text strings.Builder
		for _, b := range msg.Content {
			text.WriteString(b.Text)
		}
		return text.String(), err
	},
}

func TestStream(t *testing.T) { streamtest.Run(t, anthropicStream) }
