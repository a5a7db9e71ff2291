package routesim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// loopSystem is the loop with the route ladder.
type loopSystem struct {
	l      *si.Loop
	p      *provider
	cs     map[string]Call
	routes si.Routes
}

// newLoopSystem opens a loop on the provider's clock with routes and
// cfg, as docs/llm.md sets it up; the test closes it.
func newLoopSystem(t *testing.T, p *provider, routes si.Routes, cfg si.Config) *loopSystem {
	t.Helper()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(p.clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.DiscardHandler)), si.WithRoutes(routes), si.WithDefaultConfig(cfg),
		si.WithRetryPolicy(si.RetryPolicy{JitterSeed: 26}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &loopSystem{l: l, p: p, cs: map[string]Call{}, routes: routes}
}

// agentKey is the API key of agent's client.
func agentKey(agent string) string { return "sk-" + agent }

// call makes one call of agent through the loop, with the agent's own
// client.
func (s *loopSystem) call(ctx context.Context, agent string) outcome {
	c, ok := s.cs[agent]
	if !ok {
		c, _ = s.p.client(agentKey(agent))
		s.cs[agent] = c
	}
	rep, _ := s.l.ExecuteWithImprovement(ctx, agent, func(ctx context.Context, cfg si.Config) error {
		return ask(ctx, c, s.routes.Model(cfg), cfg.Timeout)
	})
	return outcome{ok: rep.Success}
}

// litellm is a baseline router that behaves like LiteLLM Router with its
// documented defaults, one deployment per model, the models in order as
// fallbacks:
//
//   - num_retries 2: a retryable failure (408, 429, 5xx, timeout,
//     connection) is retried twice on the same model, after the
//     Retry-After the provider sent, else after 0.5 s doubled each time;
//     401, 403, 404 and 400 are not retried
//     (docs.litellm.ai/docs/router/learn/reliability, "Retries");
//   - fallbacks: when a model's retries are used up, the request moves
//     to the next model in order (same page, "Fallbacks");
//   - cooldown: a deployment with more than allowed_fails (3) failures in
//     the current minute, or one answering 429, 401, 404 or 408, is taken
//     out of every pick for cooldown_time, 5 s (litellm/constants.py
//     DEFAULT_COOLDOWN_TIME_SECONDS; router_utils/cooldown_handlers.py
//     _is_cooldown_required), and returns when it expires; a request
//     whose models are all cooling down fails at once.
//
// Counting a single-deployment group's cooldown at all favours the
// baseline: LiteLLM skips it in some versions, and then keeps calling a
// failing model.
type litellm struct {
	clk     *fakeclock.Clock
	c       Call
	sc      StreamCall    // streams with it instead, when not nil
	idle    time.Duration // its stream_timeout: the longest wait for the next bytes of a stream
	net     *network      // the client's: the response of a failed request
	models  []string
	timeout time.Duration
	cool    map[string]time.Time
	fails   map[string][]time.Time
}

// newLiteLLM returns the baseline router over models, with one client
// (API key "sk-baseline") for every agent.
func newLiteLLM(p *provider, models []string, timeout time.Duration) *litellm {
	c, net := p.client("sk-baseline")
	return &litellm{clk: p.clk, c: c, net: net, models: models, timeout: timeout, cool: map[string]time.Time{}, fails: map[string][]time.Time{}}
}

// call makes one call by LiteLLM's rules; the agent does not matter.
func (r *litellm) call(ctx context.Context, _ string) outcome {
	for _, m := range r.models {
		if r.clk.Now().Before(r.cool[m]) {
			continue
		}
		for attempt := 0; attempt < 3; attempt++ {
			short, err := r.ask(ctx, m)
			if err == nil {
				return outcome{ok: true, short: short}
			}
			status := r.statusOf(err)
			r.failed(m, status)
			if !retryable(status) || r.clk.Now().Before(r.cool[m]) || attempt == 2 {
				break
			}
			wait := 500 * time.Millisecond << attempt
			if ra := r.retryAfterOf(); ra > 0 {
				wait = ra
			}
			r.clk.Advance(wait)
		}
	}
	return outcome{}
}

// ask makes one request on model: streamed with r.sc when it has one,
// under its read timeout; short reports a streamed answer short of the
// whole, which LiteLLM passes on as it came.
func (r *litellm) ask(ctx context.Context, m string) (short bool, err error) {
	if r.sc == nil {
		return false, ask(ctx, r.c, m, r.timeout)
	}
	ctx = context.WithValue(context.WithValue(ctx, timeoutKey{}, r.timeout), readTimeoutKey{}, r.idle)
	text, err := r.sc(ctx, m)
	return err == nil && text != fullText, err
}

// failed books a failure of model with status, and cools the model down
// by LiteLLM's rules.
func (r *litellm) failed(model string, status int) {
	now := r.clk.Now()
	var recent []time.Time
	for _, t := range r.fails[model] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	recent = append(recent, now)
	r.fails[model] = recent
	switch {
	case status == 429 || status == 401 || status == 404 || status == 408, len(recent) > 3:
		r.cool[model] = now.Add(5 * time.Second)
	}
}

// statusOf is the HTTP status of the failed request that gave err: its
// response's, 408 for a timeout, 0 for a connection error.
func (r *litellm) statusOf(err error) int {
	if status, _ := r.net.last(); status != 0 {
		return status
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return 408
	}
	return 0
}

// retryable reports whether LiteLLM retries a failure with status.
func retryable(status int) bool {
	return status == 0 || status == 408 || status == 429 || status >= 500
}

// retryAfterOf is the wait, in whole seconds, that the Retry-After
// header of the failed request's response asks for, or 0.
func (r *litellm) retryAfterOf() time.Duration {
	_, ra := r.net.last()
	if s, err := strconv.Atoi(ra); err == nil {
		return time.Duration(s) * time.Second
	}
	return 0
}

// figures are one system's figures on one scenario.
type figures struct {
	success     float64       // share of the measured calls that succeeded
	perCall     float64       // requests per call, over all calls
	onPrimary   float64       // share of the measured calls whose last request went to the primary
	slowest     time.Duration // the longest a measured call took to its answer
	calls, reqs int
}

// figuresOf sums up outs: success and the share on primary over the
// calls measured keeps, requests per call over all.
func figuresOf(outs []outcome, measured func(outcome) bool, primary string) figures {
	var f figures
	var n, ok, prim int
	for _, o := range outs {
		f.calls++
		f.reqs += o.requests
		if !measured(o) {
			continue
		}
		n++
		if o.ok {
			ok++
		}
		f.slowest = max(f.slowest, o.dur)
		if o.model == primary {
			prim++
		}
	}
	if n > 0 {
		f.success, f.onPrimary = float64(ok)/float64(n), float64(prim)/float64(n)
	}
	if f.calls > 0 {
		f.perCall = float64(f.reqs) / float64(f.calls)
	}
	return f
}

// compare checks that the loop is at least as good as the baseline on
// success and requests per call, and adds the row to the table.
func (s *sim) compare(t *testing.T, name string, loop, base figures) {
	t.Helper()
	s.mu.Lock()
	// t is Run's test's subtest all/<scenario> (see sim.rows).
	_, sub, _ := strings.Cut(t.Name(), "/")
	s.rows[sub] = fmt.Sprintf("| %s | %.1f %% | %.1f %% | %.2f | %.2f | %v | %v |", name, 100*loop.success, 100*base.success, loop.perCall, base.perCall,
		loop.slowest.Round(100*time.Millisecond), base.slowest.Round(100*time.Millisecond))
	s.mu.Unlock()
	t.Logf("%s: loop success %.2f%%, %.2f requests/call; baseline success %.2f%%, %.2f requests/call",
		name, 100*loop.success, loop.perCall, 100*base.success, base.perCall)
	if loop.success+1e-9 < base.success {
		t.Errorf("%s: the loop's success %.2f%% is below the baseline's %.2f%%", name, 100*loop.success, 100*base.success)
	}
	if loop.perCall > base.perCall+1e-9 {
		t.Errorf("%s: the loop sends %.2f requests a call, more than the baseline's %.2f", name, loop.perCall, base.perCall)
	}
}
