package eino_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudwego/eino/compose"
	si "github.com/self-improving-loop/selfimprove"
	sieino "github.com/self-improving-loop/selfimprove/integrations/eino"
)

// TestToolMiddleware runs Eino tool calls through the loop: each tool is
// an agent of its own ("tool:" and its name), a transient failure is
// retried, a permanent one is not, and the tool sees the config's timeout.
func TestToolMiddleware(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mw := sieino.ToolMiddleware(l, "tool:")
	calls := 0
	search := mw.Invokable(func(ctx context.Context, in *compose.ToolInput) (*compose.ToolOutput, error) {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the tool's context has no deadline")
		}
		if calls == 1 {
			return nil, errors.New("503 service unavailable")
		}
		return &compose.ToolOutput{Result: "found " + in.Arguments}, nil
	})
	out, err := search(context.Background(), &compose.ToolInput{Name: "search", Arguments: `{"q":"x"}`})
	if err != nil || out.Result != `found {"q":"x"}` || calls != 2 {
		t.Fatalf("search: %v, %v after %d calls; want the second attempt's result", out, err, calls)
	}
	denied := errors.New("401 Unauthorized: invalid api key")
	n := 0
	auth := mw.Invokable(func(context.Context, *compose.ToolInput) (*compose.ToolOutput, error) { n++; return nil, denied })
	if _, err := auth(context.Background(), &compose.ToolInput{Name: "crm"}); !errors.Is(err, denied) || n != 1 {
		t.Fatalf("crm: %v after %d attempts; want the tool's own error after one", err, n)
	}
	if s := l.Stats("tool:search"); s.Calls != 1 || s.Failures != 0 {
		t.Errorf("tool:search stats %+v, want 1 successful call", s)
	}
	if s := l.Stats("tool:crm"); s.Calls != 1 || s.Failures != 1 {
		t.Errorf("tool:crm stats %+v, want 1 failed call", s)
	}
}
