package langchaingo_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/tmc/langchaingo/llms"
)

// TestCallEndedByItsContextSaysWhy: the caller's context ends while the
// server has not answered: a deadline passes, a cancel, a cancel with a
// cause of its own. Streamed or not, the error carries the context's
// cause (which, without a cause of the caller's, is the context's
// error). Before, the call without streaming returned langchaingo's bare
// "request timeout: API call exceeded deadline" ("request cancelled",
// "network error: failed to reach API server" when cancelled), which
// errors.Is(err, context.DeadlineExceeded) did not match; the streamed
// call already joined the context's cause.
func TestCallEndedByItsContextSaysWhy(t *testing.T) {
	asked := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		asked <- struct{}{}
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	gone := errors.New("the user left")
	for _, stream := range []bool{false, true} {
		var opts []llms.CallOption
		if stream {
			opts = append(opts, llms.WithStreamingFunc(func(context.Context, []byte) error { return nil }))
		}
		m := wrap(t, newLoop(t), llm(t, &oaifake.Server{Server: srv}), adapter.Options{})

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := m.GenerateContent(ctx, hi, opts...)
		cancel()
		<-asked
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("streaming %v, deadline: %q is not context.DeadlineExceeded", stream, err)
		}
		for _, cause := range []error{nil, gone} {
			ctx, stop := context.WithCancelCause(context.Background())
			go func() { <-asked; stop(cause) }()
			_, err = m.GenerateContent(ctx, hi, opts...)
			if want := context.Cause(ctx); !errors.Is(err, want) {
				t.Errorf("streaming %v, cancelled: %q is not %q", stream, err, want)
			}
		}
	}
}
