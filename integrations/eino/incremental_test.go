package eino_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
)

// slowModel streams its words one every gap; its first attempts (fails)
// send two words, then fail with a 503.
type slowModel struct {
	words []string
	gap   time.Duration
	fails int
	n     int
}

func (m *slowModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return schema.AssistantMessage(strings.Join(m.words, ""), nil), nil
}

func (m *slowModel) Stream(ctx context.Context, _ []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m.n++
	fail := m.n <= m.fails
	sr, sw := schema.Pipe[*schema.Message](0)
	go func() {
		defer sw.Close()
		for i, w := range m.words {
			select {
			case <-time.After(m.gap):
			case <-ctx.Done():
				sw.Send(nil, ctx.Err())
				return
			}
			if fail && i == 2 {
				sw.Send(nil, errors.New("503 Service Unavailable: the server is overloaded"))
				return
			}
			sw.Send(schema.AssistantMessage(w, nil), nil)
		}
	}()
	return sr, nil
}

func (m *slowModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// Issue 40, item 9: with Options.Incremental, Model.Stream passes each
// chunk on as it arrives: 9 chunks 400 ms apart reach the caller from
// 400 ms on, where the buffered mode hands them all over at 3.6 s (the
// whole stream). An attempt that fails after its first words is said
// void with ErrStartOver, and the retry's words follow.
func TestStreamIncremental(t *testing.T) {
	words := []string{"The ", "loop ", "keeps ", "the ", "stream ", "a ", "stream, ", "word ", "by word."}
	for _, tc := range []struct {
		name        string
		incremental bool
		fails       int
		first       time.Duration
		want        string
	}{
		{"buffered", false, 0, 9 * 400 * time.Millisecond, strings.Join(words, "")},
		{"incremental", true, 0, 400 * time.Millisecond, strings.Join(words, "")},
		{"incremental, one attempt fails", true, 1, 400 * time.Millisecond, "The loop |" + strings.Join(words, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLoop(t)
				m := wrap(t, l, &slowModel{words: words, gap: 400 * time.Millisecond, fails: tc.fails}, adapter.Options{Incremental: tc.incremental})
				start := time.Now()
				sr, err := m.Stream(context.Background(), hi)
				if err != nil {
					t.Fatal(err)
				}
				defer sr.Close()
				var got strings.Builder
				var first time.Duration
				for {
					msg, err := sr.Recv()
					if err == io.EOF {
						break
					}
					if errors.Is(err, adapter.ErrStartOver) {
						got.WriteString("|")
						continue
					}
					if err != nil {
						t.Fatalf("Recv: %v", err)
					}
					if first == 0 {
						first = time.Since(start)
					}
					got.WriteString(msg.Content)
				}
				if first != tc.first || got.String() != tc.want {
					t.Errorf("first chunk after %v, read %q; want %v, %q", first, got.String(), tc.first, tc.want)
				}
			})
		})
	}
}
