package eino_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cloudwego/eino/schema"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
)

// readAll concatenates a stream's chunks.
func readAll(sr *schema.StreamReader[*schema.Message], err error) (*schema.Message, error) {
	if err != nil {
		return nil, err
	}
	defer sr.Close()
	var chunks []*schema.Message
	for {
		m, err := sr.Recv()
		if err == io.EOF {
			return schema.ConcatMessages(chunks)
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, m)
	}
}

// einoStream: the suite every adapter's Stream passes, with Eino's
// OpenAI model.
var einoStream = oaifake.Stream(func(ctx context.Context, url string, onToken func()) (string, error) {
	var b strings.Builder
	_, err := adapter.Stream(ctx, chatModel(url, nil), "gpt-4.1", hi, func(m *schema.Message) {
		if m.Content != "" {
			b.WriteString(m.Content)
			onToken()
		}
	})
	return b.String(), err
})

func TestStream(t *testing.T) { streamtest.Run(t, einoStream) }

// TestStreamTruncatedRetried: through Model.Stream, a stream the server
// closes without "data: [DONE]" is a failure, retried; the reader holds
// the whole answer of the attempt that ended.
func TestStreamTruncatedRetried(t *testing.T) {
	s := oaifake.NewSSEServer(t, func(_ string, n int) []string {
		if n == 1 {
			return []string{oaifake.StartEvent, oaifake.TokenEvent("Hel")}
		}
		return oaifake.SSE("Hel", "lo")
	})
	l := newLoop(t)
	m := wrap(t, l, chatModel(s.URL, nil), adapter.Options{})
	msg, err := readAll(m.Stream(context.Background(), hi))
	if err != nil || msg.Content != "Hello" || len(s.Requests()) != 2 {
		t.Fatalf("%v, %+v after %d requests", err, msg, len(s.Requests()))
	}
}
