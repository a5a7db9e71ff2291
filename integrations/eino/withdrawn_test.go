package eino_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// ask runs the agent on q and returns its answer, or the error of its
// run.
func ask(ctx context.Context, r *adk.Runner, q string) (string, error) {
	it := r.Query(ctx, q)
	answer := ""
	for {
		ev, ok := it.Next()
		if !ok {
			return answer, nil
		}
		if ev.Err != nil {
			return "", ev.Err
		}
		if ev.Output != nil && ev.Output.MessageOutput != nil {
			m, err := ev.Output.MessageOutput.GetMessage()
			if err != nil {
				return "", err
			}
			answer = m.Content
		}
	}
}

// agent is an Eino ChatModelAgent on m, run by a Runner that streams or
// not; Eino's own retries are off (ModelRetryConfig nil).
func agent(t *testing.T, m *adapter.Model, streaming bool) *adk.Runner {
	t.Helper()
	a, err := adk.NewChatModelAgent(context.Background(), &adk.ChatModelAgentConfig{Name: "a", Description: "answers", Instruction: "Answer briefly.", Model: m})
	if err != nil {
		t.Fatal(err)
	}
	return adk.NewRunner(context.Background(), adk.RunnerConfig{Agent: a, EnableStreaming: streaming})
}

// TestWithdrawnModelMovedToFallback: an Eino ChatModelAgent on the
// wrapped model, run by a Runner (streaming and not): the first call
// that meets a withdrawn primary succeeds on the fallback at its next
// attempt, and the agent moves there: no run fails, and the withdrawn
// model gets no more requests. (The return once it is reinstated is
// TestWithdrawnModelMovedToFallbackAndBack.) The loop's clock is
// simulated, a minute a call.
func TestWithdrawnModelMovedToFallback(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		var s *oaifake.Server
		if streaming {
			s = oaifake.NewSSEServer(t, func(model string, _ int) []string {
				if model == "gpt-4.1" {
					return []string{oaifake.ModelNotFoundEvent("gpt-4.1")}
				}
				return oaifake.SSE("hi")
			})
		} else {
			s = oaifake.NewServer(t, func(model string, _ int) oaifake.Reply {
				if model == "gpt-4.1" {
					return oaifake.ModelNotFound("gpt-4.1")
				}
				return oaifake.OK("hi")
			})
		}
		clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		r := agent(t, wrap(t, l, chatModel(s.URL, nil), adapter.Options{Routes: routes}), streaming)
		fails := 0
		for range 60 {
			if answer, err := ask(context.Background(), r, "hi"); err != nil || answer != "hi" {
				t.Logf("%q %v", answer, err)
				fails++
			}
			clk.Advance(time.Minute)
		}
		got := s.Requests()
		old := 0
		for _, m := range got {
			if m == "gpt-4.1" {
				old++
			}
		}
		if fails != 0 || got[0] != "gpt-4.1" || got[1] != "gpt-4o" || old > 2 || l.Config("a").Route != "gpt-4o" {
			t.Errorf("streaming %v: %d runs failed; %d requests to the withdrawn model (first %q); route %q", streaming, fails, old, got[:2], l.Config("a").Route)
		}
	}
}

// TestWithdrawnModelMovedToFallbackAndBack: an agent whose model calls go
// through the Middleware hook, run by a real adk.Runner (streaming and
// not) against the fake OpenAI server, on which the primary is withdrawn
// (404 model_not_found) for 30 hours, then reinstated: the agent moves to
// the fallback at once, with no run failing, sends the withdrawn model at
// most a request a day, and is back on it after the second day's probe
// (oaifake.Withdrawal). The loop's clock is simulated.
func TestWithdrawnModelMovedToFallbackAndBack(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		w := oaifake.NewWithdrawal(t, "gpt-4.1", streaming)
		clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		r := hooked(t, l, w.Server.URL, adapter.Options{Routes: routes}, streaming, adk.ToolsConfig{})
		w.Run(t, clk, l, "a", "gpt-4.1", "gpt-4o", func(ctx context.Context) (string, error) { return ask(ctx, r, "hi") })
	}
}
