package genkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
)

// TestWrapTool runs a Genkit tool function through the loop: it is an
// agent of its own, a transient failure is retried, and it sees the
// config's timeout.
func TestWrapTool(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := 0
	search := adapter.WrapTool(l, "tool:search", func(tc *ai.ToolContext, q string) (string, error) {
		calls++
		if _, ok := tc.Deadline(); !ok {
			return "", errors.New("no deadline")
		}
		if calls == 1 {
			return "", errors.New("503 service unavailable")
		}
		return "found " + q, nil
	})
	out, err := search(&ai.ToolContext{Context: context.Background()}, "x")
	if err != nil || out != "found x" || calls != 2 {
		t.Fatalf("search: %q, %v after %d calls; want the second attempt's answer", out, err, calls)
	}
	if s := l.Stats("tool:search"); s.Calls != 1 || s.Failures != 0 {
		t.Errorf("tool:search stats %+v, want 1 successful call", s)
	}
}
