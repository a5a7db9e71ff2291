package langchaingo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	silc "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
)

// flaky is a langchaingo tool whose first call fails with a 503.
type flaky struct{ calls int }

func (*flaky) Name() string        { return "search" }
func (*flaky) Description() string { return "searches" }
func (f *flaky) Call(ctx context.Context, input string) (string, error) {
	f.calls++
	if _, ok := ctx.Deadline(); !ok {
		return "", errors.New("no deadline")
	}
	if f.calls == 1 {
		return "", errors.New("503 service unavailable")
	}
	return "found " + input, nil
}

// TestWrapTool runs a langchaingo tool through the loop: it is an agent
// of its own, a transient failure is retried, and it sees the config's
// timeout.
func TestWrapTool(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2, Timeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := &flaky{}
	var tool silc.ToolCaller = silc.WrapTool(l, "tool:", f)
	out, err := tool.Call(context.Background(), "x")
	if err != nil || out != "found x" || f.calls != 2 {
		t.Fatalf("Call: %q, %v after %d calls; want the second attempt's answer", out, err, f.calls)
	}
	if tool.Name() != "search" {
		t.Errorf("Name() = %q", tool.Name())
	}
	if s := l.Stats("tool:search"); s.Calls != 1 || s.Failures != 0 {
		t.Errorf("tool:search stats %+v, want 1 successful call", s)
	}
}
