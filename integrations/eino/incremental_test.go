package eino_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
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
// void with ErrStartOver, and the retry's words follow. The reader
// returns the words alone: the probes of the adapter's forwarder never
// reach it.
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
					if err != nil || msg == nil || msg.Content == "" {
						t.Fatalf("Recv: %v, %v; want a word", msg, err)
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

// stallModel streams "Hel", then either stalls until its context ends
// (noting when) or, with fail set, fails with a 503.
type stallModel struct {
	fail  bool
	mu    sync.Mutex
	n     int       // the calls of Stream
	ended time.Time // when the first stalled stream's context ended
}

func (m *stallModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return schema.AssistantMessage("Hello", nil), nil
}

func (m *stallModel) Stream(ctx context.Context, _ []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m.mu.Lock()
	m.n++
	m.mu.Unlock()
	sr, sw := schema.Pipe[*schema.Message](0)
	go func() {
		defer sw.Close()
		sw.Send(schema.AssistantMessage("Hel", nil), nil)
		if m.fail {
			sw.Send(nil, errors.New("503 Service Unavailable: the server is overloaded"))
			return
		}
		<-ctx.Done()
		m.mu.Lock()
		if m.ended.IsZero() {
			m.ended = time.Now()
		}
		m.mu.Unlock()
		sw.Send(nil, ctx.Err())
	}()
	return sr, nil
}

func (m *stallModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// TestIncrementalCloseCancelsTheCall: closing the reader of an
// Incremental stream cancels the call at once, as Options.Incremental
// says. The caller reads "Hel" and closes the reader while the stream
// stalls, or while the loop waits out its back-off before a retry: the
// stream's context ends at once, and no other attempt is made. Before,
// the adapter learnt of the close only when it passed the next chunk
// on: the stalled request was held until Config.Timeout (a minute here;
// forever without one), and the retry was made after the back-off.
func TestIncrementalCloseCancelsTheCall(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "stalled stream", true: "waiting to retry"}[fail], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLoop(t, si.WithStrategy(nil), si.WithDefaultConfig(si.Config{MaxAttempts: 3, Timeout: time.Minute, Backoff: time.Minute}))
				inner := &stallModel{fail: fail}
				sr, err := wrap(t, l, inner, adapter.Options{Incremental: true}).Stream(context.Background(), hi)
				if err != nil {
					t.Fatal(err)
				}
				if msg, err := sr.Recv(); err != nil || msg.Content != "Hel" {
					t.Fatalf("Recv: %v, %v", msg, err)
				}
				synctest.Wait() // the stream stalls, or the loop waits to retry
				closed := time.Now()
				sr.Close()
				synctest.Wait()
				time.Sleep(2 * time.Minute) // past the timeout and the back-off
				inner.mu.Lock()
				defer inner.mu.Unlock()
				if inner.n != 1 {
					t.Errorf("%d attempts; want 1: the reader was closed", inner.n)
				}
				if !fail && !inner.ended.Equal(closed) {
					t.Errorf("the stalled stream's context ended %v after the reader was closed; want at once", inner.ended.Sub(closed))
				}
			})
		})
	}
}
