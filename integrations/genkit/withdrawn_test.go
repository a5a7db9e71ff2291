package genkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// TestWithdrawnModelMovedToFallback: genkit.Generate with the
// middleware (streaming and not): the first call that meets a withdrawn
// primary succeeds on the fallback at its next attempt, and the agent
// moves there: no call fails, and the withdrawn model gets no more
// requests. (The return once it is reinstated is
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
		g := newGenkit(s.URL, nil)
		routes := si.Routes{Primary: "openai/gpt-4.1", Fallbacks: []string{"openai/gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		mw := middleware(t, l, adapter.Options{Routes: routes, Genkit: g})
		var cb ai.ModelStreamCallback
		if streaming {
			cb = func(context.Context, *ai.ModelResponseChunk) error { return nil }
		}
		fails := 0
		for range 60 {
			if text, err := generate(context.Background(), g, mw, cb); err != nil || text != "hi" {
				t.Logf("%q %v", text, err)
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
		if fails != 0 || got[0] != "gpt-4.1" || got[1] != "gpt-4o" || old > 2 || l.Config("a").Route != "openai/gpt-4o" {
			t.Errorf("streaming %v: %d calls failed; %d requests to the withdrawn model (first %q); route %q", streaming, fails, old, got[:2], l.Config("a").Route)
		}
	}
}

// TestWithdrawnModelMovedToFallbackAndBack: genkit.Generate with the
// middleware (streaming and not) against the fake OpenAI server, on
// which the primary is withdrawn (404 model_not_found) for 30 hours,
// then reinstated: the agent moves to the fallback at once, with no call
// failing, sends the withdrawn model at most a request a day, and is
// back on it after the second day's probe (oaifake.Withdrawal). The
// loop's clock is simulated.
func TestWithdrawnModelMovedToFallbackAndBack(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		w := oaifake.NewWithdrawal(t, "gpt-4.1", streaming)
		clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		g := newGenkit(w.Server.URL, nil)
		routes := si.Routes{Primary: "openai/gpt-4.1", Fallbacks: []string{"openai/gpt-4o"}}
		l := newLoop(t, si.WithClock(clk), si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		mw := middleware(t, l, adapter.Options{Routes: routes, Genkit: g})
		var cb ai.ModelStreamCallback
		if streaming {
			cb = func(context.Context, *ai.ModelResponseChunk) error { return nil }
		}
		w.Run(t, clk, l, "a", "openai/gpt-4.1", "openai/gpt-4o", func(ctx context.Context) (string, error) { return generate(ctx, g, mw, cb) })
	}
}
