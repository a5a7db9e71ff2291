package eino_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// A tool that asks for a human's approval (compose.Interrupt) under the
// Middleware with a ToolPrefix: the interrupt is passed on after one run
// of the tool, and booked as no failure. Before, the tool ran 3 times
// (MaxAttempts) and a failure was booked against it.
func TestToolInterruptNotRetried(t *testing.T) {
	for _, prefix := range []string{"", "tool:"} {
		s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
			if n == 1 {
				return toolCall("approve")
			}
			return oaifake.OK("done")
		})
		l := newLoop(t, si.WithStrategy(nil), si.WithDefaultConfig(si.Config{MaxAttempts: 3, Timeout: time.Minute}))
		calls := 0
		approve, err := utils.InferTool("approve", "asks a human", func(ctx context.Context, in query) (string, error) {
			calls++
			return "", compose.Interrupt(ctx, "approve "+in.Q+"?")
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg := adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{approve}}}
		it := hooked(t, l, s.URL, adapter.Options{ToolPrefix: prefix}, false, cfg).Query(context.Background(), "do x")
		interrupted, runErr := false, error(nil)
		for {
			ev, ok := it.Next()
			if !ok {
				break
			}
			if ev.Err != nil {
				runErr = ev.Err
			}
			if ev.Action != nil && ev.Action.Interrupted != nil {
				interrupted = true
			}
		}
		ts := l.Stats("tool:approve")
		if calls != 1 || !interrupted || runErr != nil || ts.Failures != 0 {
			t.Errorf("prefix %q: the tool ran %d times, interrupted %v, run error %v, %d failures booked; want 1 run, an interrupt, no failure",
				prefix, calls, interrupted, runErr, ts.Failures)
		}
	}
}
