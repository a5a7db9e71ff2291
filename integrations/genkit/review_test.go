package genkit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// The caller's streaming callback stops the stream (its client went
// away): genkit.Generate returns its error as it is, never a panic, never
// a network failure of the stream. Before, a stream read whole made the
// middleware return no response and no error, and Genkit panicked; one
// still coming was an interrupted stream (network).
func TestCallbackErrorIsTheCallers(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole stream in one read", true: "stream still coming"}[slow], func(t *testing.T) {
			var requests atomic.Int32
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for i, e := range oaifake.SSE("Hel", "lo") {
					io.WriteString(w, e+"\n\n")
					if slow && i == 1 {
						w.(http.Flusher).Flush()
						time.Sleep(200 * time.Millisecond)
					}
				}
			}))
			defer s.Close()
			l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
			errStop := errors.New("client went away")
			calls := 0
			_, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), func(context.Context, *ai.ModelResponseChunk) error {
				calls++
				return errStop
			})
			// Its class is the caller's error's (other: retried like any
			// the loop does not know, RetryPolicy.Permanent), not a
			// network failure of the stream.
			if !errors.Is(err, errStop) || failure.Classify(err) != failure.ClassOther {
				t.Errorf("err %v (class %s) after %d requests, the callback called %d times; want the callback's error as it is", err, failure.Classify(err), requests.Load(), calls)
			}
		})
	}
}

// A 200 stream that ends properly but carries no choice: an error, not a
// panic. Before, the middleware returned no response and no error.
func TestEmptyStreamIsAnError(t *testing.T) {
	s := oaifake.NewSSEServer(t, func(string, int) []string { return []string{"data: [DONE]"} })
	l := newLoop(t)
	_, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), func(context.Context, *ai.ModelResponseChunk) error { return nil })
	if err == nil {
		t.Errorf("an empty stream gave no error")
	}
}
