package openai_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/openai"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// The route scenarios of docs/performance.md#routes: the real openai-go
// client, through the loop (or through a baseline router), against a
// local server that answers with OpenAI's bodies and headers, on a
// simulated clock. A script says, for each request, by model and time,
// what the provider answers and how long it takes; hours of traffic run
// in seconds.

// answer is a scripted provider answer: the reply and its latency.
type answer struct {
	reply
	latency time.Duration
}

// script answers a request for model at simulated time t.
type script func(model string, t time.Time) answer

// request is one request the provider saw.
type request struct {
	at     time.Time
	model  string
	key    string // the API key: one per agent
	status int
}

// provider is the local OpenAI server and the simulated network in front
// of it: a request whose latency exceeds the attempt's timeout ends with
// context.DeadlineExceeded after the timeout, as a real one would.
type provider struct {
	clk    *fakeclock.Clock
	srv    *httptest.Server
	script script
	mu     sync.Mutex
	reqs   []request
}

func newProvider(t *testing.T, clk *fakeclock.Clock, sc script) *provider {
	p := &provider{clk: clk, script: sc}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		model := modelOf(body)
		a := p.script(model, p.clk.Now())
		p.mu.Lock()
		p.reqs = append(p.reqs, request{p.clk.Now(), model, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), a.status})
		p.mu.Unlock()
		for k, v := range a.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("X-Sim-Latency", a.latency.String())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func modelOf(body []byte) string {
	const key = `"model":"`
	i := strings.Index(string(body), key)
	if i < 0 {
		return ""
	}
	rest := string(body[i+len(key):])
	return rest[:strings.IndexByte(rest, '"')]
}

// timeoutKey carries the attempt's timeout to the simulated network.
type timeoutKey struct{}

// RoundTrip sends req to the local server and moves the clock by the
// answer's latency, or by the timeout when the latency exceeds it.
func (p *provider) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	lat, _ := time.ParseDuration(resp.Header.Get("X-Sim-Latency"))
	if to, ok := req.Context().Value(timeoutKey{}).(time.Duration); ok && to > 0 && lat > to {
		resp.Body.Close()
		p.clk.Advance(to)
		return nil, context.DeadlineExceeded
	}
	p.clk.Advance(lat)
	return resp, nil
}

// client is an openai-go client through the simulated network, with the
// SDK's own retries off.
func (p *provider) client(key string) oai.Client {
	opts := append(adapter.ClientOptions(p), option.WithAPIKey(key), option.WithBaseURL(p.srv.URL+"/v1/"))
	return oai.NewClient(opts...)
}

// count returns the requests for which keep is true.
func (p *provider) count(keep func(request) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.reqs {
		if keep(r) {
			n++
		}
	}
	return n
}

// sent returns how many requests the provider has seen.
func (p *provider) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// ask makes one chat completion on model, under timeout.
func ask(ctx context.Context, c oai.Client, model string, timeout time.Duration) error {
	ctx = context.WithValue(ctx, timeoutKey{}, timeout)
	_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	return adapter.Wrap(err)
}

// outcome is one call as a system made it.
type outcome struct {
	at       time.Time
	agent    string
	ok       bool
	requests int
	model    string // the model of the call's last request
}

// system makes a call of agent at the provider; the loop and the baseline
// router are the two.
type system interface {
	call(ctx context.Context, agent string) outcome
}

// drive makes a call of each agent every gap for d, from the provider's
// clock, and returns the outcomes.
func drive(p *provider, sys system, agents []string, gap, d time.Duration) []outcome {
	start := p.clk.Now()
	var out []outcome
	for i := 0; time.Duration(i)*gap < d; i++ {
		at := start.Add(time.Duration(i) * gap)
		if now := p.clk.Now(); now.Before(at) {
			p.clk.Advance(at.Sub(now))
		}
		for _, a := range agents {
			before := p.sent()
			o := sys.call(context.Background(), a)
			o.at, o.agent = at, a
			p.mu.Lock()
			if o.requests = len(p.reqs) - before; o.requests > 0 {
				o.model = p.reqs[len(p.reqs)-1].model
			}
			p.mu.Unlock()
			out = append(out, o)
		}
	}
	return out
}

// loopSystem is the loop with the route ladder.
type loopSystem struct {
	l      *si.Loop
	p      *provider
	cs     map[string]oai.Client
	routes si.Routes
}

func newLoopSystem(t *testing.T, p *provider, routes si.Routes, cfg si.Config, opts ...si.Option) *loopSystem {
	t.Helper()
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(p.clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.DiscardHandler)), si.WithRoutes(routes), si.WithDefaultConfig(cfg),
		si.WithRetryPolicy(si.RetryPolicy{JitterSeed: 26})}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &loopSystem{l: l, p: p, cs: map[string]oai.Client{}, routes: routes}
}

func (s *loopSystem) call(ctx context.Context, agent string) outcome {
	c, ok := s.cs[agent]
	if !ok {
		c = s.p.client("sk-" + agent)
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
	c       oai.Client
	models  []string
	timeout time.Duration
	cool    map[string]time.Time
	fails   map[string][]time.Time
}

func newLiteLLM(p *provider, models []string, timeout time.Duration) *litellm {
	return &litellm{clk: p.clk, c: p.client("sk-baseline"), models: models, timeout: timeout, cool: map[string]time.Time{}, fails: map[string][]time.Time{}}
}

func (r *litellm) call(ctx context.Context, _ string) outcome {
	for _, m := range r.models {
		if r.clk.Now().Before(r.cool[m]) {
			continue
		}
		for attempt := 0; attempt < 3; attempt++ {
			err := ask(ctx, r.c, m, r.timeout)
			if err == nil {
				return outcome{ok: true}
			}
			status := statusOf(err)
			r.failed(m, status)
			if !retryable(status) || r.clk.Now().Before(r.cool[m]) || attempt == 2 {
				break
			}
			wait := 500 * time.Millisecond << attempt
			if ra := retryAfterOf(err); ra > 0 {
				wait = ra
			}
			r.clk.Advance(wait)
		}
	}
	return outcome{}
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

func statusOf(err error) int {
	var ae *oai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return 408
	}
	return 0 // a connection error
}

func retryable(status int) bool {
	return status == 0 || status == 408 || status == 429 || status >= 500
}

func retryAfterOf(err error) time.Duration {
	var ae *oai.Error
	if errors.As(err, &ae) && ae.Response != nil {
		if s, perr := strconv.Atoi(ae.Response.Header.Get("Retry-After")); perr == nil {
			return time.Duration(s) * time.Second
		}
	}
	return 0
}

// figures are one system's figures on one scenario.
type figures struct {
	success     float64 // share of the measured calls that succeeded
	perCall     float64 // requests per call, over all calls
	onPrimary   float64 // share of the measured calls whose last request went to the primary
	calls, reqs int
}

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

// table collects the side-by-side rows the scenarios print.
var table struct {
	mu   sync.Mutex
	rows []string
}

func addRow(name string, loop, base figures) {
	table.mu.Lock()
	defer table.mu.Unlock()
	table.rows = append(table.rows, fmt.Sprintf("| %s | %.1f %% | %.1f %% | %.2f | %.2f |", name, 100*loop.success, 100*base.success, loop.perCall, base.perCall))
}

// compare checks that the loop is at least as good as the baseline on
// success and requests per call, and adds the row.
func compare(t *testing.T, name string, loop, base figures) {
	t.Helper()
	addRow(name, loop, base)
	t.Logf("%s: loop success %.2f%%, %.2f requests/call; baseline success %.2f%%, %.2f requests/call",
		name, 100*loop.success, loop.perCall, 100*base.success, base.perCall)
	if loop.success+1e-9 < base.success {
		t.Errorf("%s: the loop's success %.2f%% is below the baseline's %.2f%%", name, 100*loop.success, 100*base.success)
	}
	if loop.perCall > base.perCall+1e-9 {
		t.Errorf("%s: the loop sends %.2f requests a call, more than the baseline's %.2f", name, loop.perCall, base.perCall)
	}
}

var simStart = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
