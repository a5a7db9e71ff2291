package langchaingo_test

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/tmc/langchaingo/llms"
)

// TestWithdrawnModelMovedToFallback: through the wrapped model, the
// first call that meets a withdrawn primary succeeds on the fallback at
// its next attempt, and the agent moves there: no call fails, and the
// withdrawn model gets no more requests. (The return once it is
// reinstated is TestWithdrawnModelMovedToFallbackAndBack.) The loop's
// clock is simulated, a minute a call.
func TestWithdrawnModelMovedToFallback(t *testing.T) {
	s := oaifake.NewServer(t, func(model string, _ int) oaifake.Reply {
		if model == "gpt-4.1" {
			return oaifake.ModelNotFound("gpt-4.1")
		}
		return oaifake.OK("hi")
	})
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}
	l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	m := wrap(t, l, llm(t, s), adapter.Options{Routes: routes})
	fails := 0
	for range 120 {
		if _, err := m.GenerateContent(context.Background(), hi); err != nil {
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
		t.Errorf("%d calls failed; %d requests to the withdrawn model (first %q); route %q", fails, old, got[:2], l.Config("a").Route)
	}
}

// TestWithdrawnModelMovedToFallbackAndBack: the wrapped model (streaming,
// with llms.WithStreamingFunc, and not) against the fake OpenAI server,
// on which the primary is withdrawn (404 model_not_found) for 30 hours,
// then reinstated: the agent moves to the fallback at once, with no call
// failing, sends the withdrawn model at most a request a day, and is
// back on it after the second day's probe (oaifake.Withdrawal). The
// loop's clock is simulated.
func TestWithdrawnModelMovedToFallbackAndBack(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		w := oaifake.NewWithdrawal(t, "gpt-4.1", streaming)
		clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		m := wrap(t, l, llm(t, w.Server), adapter.Options{Routes: routes})
		var opts []llms.CallOption
		if streaming {
			opts = append(opts, llms.WithStreamingFunc(func(context.Context, []byte) error { return nil }))
		}
		w.Run(t, clk, l, "a", "gpt-4.1", "gpt-4o", func(ctx context.Context) (string, error) {
			resp, err := m.GenerateContent(ctx, hi, opts...)
			if err != nil {
				return "", err
			}
			return resp.Choices[0].Content, nil
		})
	}
}
