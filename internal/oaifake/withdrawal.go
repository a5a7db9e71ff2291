package oaifake

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Withdrawal is the scenario "a withdrawn model moved to the fallback and
// back" of every framework adapter's tests: a fake OpenAI API on which
// the primary model is withdrawn (OpenAI's 404 model_not_found, as JSON,
// streaming or not), then reinstated.
type Withdrawal struct {
	// Server is the fake API: the primary's requests get the 404 while it
	// is withdrawn, every other request the answer "hi" (a stream of
	// OpenAI's events when Streaming).
	Server *Server
	// Primary is the model withdrawn, as the requests name it.
	Primary   string
	withdrawn atomic.Bool
}

// NewWithdrawal starts the fake API with primary withdrawn.
func NewWithdrawal(t testing.TB, primary string, streaming bool) *Withdrawal {
	w := &Withdrawal{Primary: primary}
	w.withdrawn.Store(true)
	w.Server = NewServer(t, func(model string, _ int) Reply {
		switch {
		case model == primary && w.withdrawn.Load():
			return ModelNotFound(model)
		case streaming:
			return SSEReply(true, "h", "i")
		}
		return OK("hi")
	})
	return w
}

// requests counts the requests to the primary.
func (w *Withdrawal) requests() int {
	n := 0
	for _, m := range w.Server.Requests() {
		if m == w.Primary {
			n++
		}
	}
	return n
}

// Run drives agent of l, through call (one call of the framework that
// returns its answer), on the loop's clock clk: a call a minute for an
// hour, then one every 5 minutes to 30 hours, with the primary withdrawn;
// then, the model reinstated, one every 5 minutes to 60 hours. It checks
// that no call fails; that the agent moves to the route fallback at
// once, away from its primary route (AgentView.Home), which gets at most
// a request a day (ProbePolicy.DeadFor) while withdrawn; and that, after
// the second day's probe, the agent is back on its primary, with its
// requests going there.
func (w *Withdrawal) Run(t testing.TB, clk *fakeclock.Clock, l *si.Loop, agent, primary, fallback string, call func(context.Context) (string, error)) {
	t.Helper()
	fails := 0
	calls := func(n int, gap time.Duration) {
		for range n {
			if answer, err := call(context.Background()); err != nil || answer != "hi" {
				t.Logf("call at %v: %q, %v", clk.Now(), answer, err)
				fails++
			}
			clk.Advance(gap)
		}
	}
	calls(60, time.Minute)
	v, _ := l.View(agent)
	if got := l.Config(agent).Route; got != fallback || v.Home != primary || fails != 0 || w.requests() > 2 {
		t.Errorf("after an hour: route %q, home %q, %d calls failed, %d requests to the withdrawn model; want %q, %q, none, at most 2",
			got, v.Home, fails, w.requests(), fallback, primary)
	}
	calls(29*12, 5*time.Minute)
	if got := l.Config(agent).Route; got != fallback || fails != 0 || w.requests() > 3 {
		t.Errorf("at 30 hours, withdrawn: route %q, %d calls failed, %d requests to the withdrawn model; want %q, none, at most 3",
			got, fails, w.requests(), fallback)
	}
	w.withdrawn.Store(false)
	calls(30*12, 5*time.Minute)
	v, _ = l.View(agent)
	got := l.Config(agent).Route
	reqs := w.Server.Requests()
	if got != "" && got != primary || v.Home != "" || fails != 0 || reqs[len(reqs)-1] != w.Primary {
		t.Errorf("at 60 hours, reinstated: route %q, home %q, %d calls failed, last request to %q; want the primary %q, none, %q",
			got, v.Home, fails, reqs[len(reqs)-1], primary, w.Primary)
	}
}
