package openai_test

import (
	"hash/fnv"
	"os"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// OpenAI's answers, as the API sends them.
var (
	overloaded = apiErr(503, "server_error", "", "The server is overloaded or not ready yet.", nil)
	withdrawn  = apiErr(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations", nil)
	noQuota    = apiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", nil)
)

func fine(lat time.Duration) answer { return answer{reply: ok, latency: lat} }

// chance is a fixed pseudo-random draw in [0, 1) for key.
func chance(key string) float64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// scenario runs a script through the loop and through the baseline, each
// on its own clock and provider.
type scenario struct {
	name   string
	routes si.Routes
	cfg    si.Config
	agents []string
	gap, d time.Duration
	script func(start time.Time) script
	opts   []si.Option
}

type run struct {
	p    *provider
	outs []outcome
	sys  *loopSystem
}

func (sc scenario) loop(t *testing.T) run {
	clk := fakeclock.New(simStart)
	p := newProvider(t, clk, sc.script(simStart))
	sys := newLoopSystem(t, p, sc.routes, sc.cfg, sc.opts...)
	return run{p: p, outs: drive(p, sys, sc.agents, sc.gap, sc.d), sys: sys}
}

func (sc scenario) baseline(t *testing.T) run {
	clk := fakeclock.New(simStart)
	p := newProvider(t, clk, sc.script(simStart))
	lad := append([]string{sc.routes.Primary}, sc.routes.Fallbacks...)
	return run{p: p, outs: drive(p, newLiteLLM(p, lad, sc.cfg.Timeout), sc.agents, sc.gap, sc.d)}
}

// all measures every call.
func all(time.Time) func(outcome) bool { return func(outcome) bool { return true } }

// between measures the calls in [from, to) after start.
func between(start time.Time, from, to time.Duration) func(outcome) bool {
	return func(o outcome) bool { return !o.at.Before(start.Add(from)) && o.at.Before(start.Add(to)) }
}

var ladder = si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}}

// llmConfig is the config docs/llm.md gives an agent: the SDK's retries
// off, the loop's on.
var llmConfig = si.Config{MaxAttempts: 3, Timeout: 30 * time.Second}

// The primary answers 503 for 30 minutes while the fallback is healthy.
func TestScenarioOverloadedPrimary(t *testing.T) {
	const from, to = 2 * time.Hour, 2*time.Hour + 30*time.Minute
	sc := scenario{name: "primary overloaded 30 min", routes: ladder, cfg: llmConfig, agents: []string{"a"}, gap: 30 * time.Second, d: 24 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				if model == "gpt-4.1" && !t.Before(start.Add(from)) && t.Before(start.Add(to)) {
					return answer{reply: overloaded, latency: 50 * time.Millisecond}
				}
				return fine(600 * time.Millisecond)
			}
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	outage := figuresOf(lr.outs, between(simStart, from+10*30*time.Second, to), "gpt-4.1")
	if outage.success < 0.90 {
		t.Errorf("during the outage after its first 10 calls: %.1f%% success, want at least 90%%", 100*outage.success)
	}
	back := time.Time{}
	for _, ch := range lr.sys.l.Changes("a") {
		if ch.To.Route == "" || ch.To.Route == "gpt-4.1" {
			if ch.State == si.ChangeConfirmed && ch.AppliedAt.After(simStart.Add(to)) && back.IsZero() {
				back = ch.AppliedAt
			}
		}
	}
	if lr.sys.l.Config("a").Route != "" && lr.sys.l.Config("a").Route != "gpt-4.1" {
		t.Errorf("the day ends on route %q, not the primary", lr.sys.l.Config("a").Route)
	}
	if moved := slicesAny(lr.sys.l.Changes("a"), func(ch si.Change) bool { return ch.To.Route == "gpt-4o" }); moved && (back.IsZero() || back.Sub(simStart.Add(to)) > 15*time.Minute) {
		t.Errorf("back on the primary at %v, more than 15 minutes after its recovery at %v", back, simStart.Add(to))
	}
	rest := figuresOf(lr.outs, between(simStart, to+15*time.Minute, 24*time.Hour), "gpt-4.1")
	if rest.onPrimary < 0.95 {
		t.Errorf("%.1f%% of the rest of the day's calls on the primary, want at least 95%%", 100*rest.onPrimary)
	}
	t.Logf("outage: %.1f%% success; back on the primary %v after it recovered; %.1f%% of the rest of the day on it",
		100*outage.success, back.Sub(simStart.Add(to)), 100*rest.onPrimary)
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), "gpt-4.1"), figuresOf(br.outs, all(simStart), "gpt-4.1"))
}

// The primary is withdrawn; the fallback answers 503 for its first 5
// minutes.
func TestScenarioWithdrawnPrimary(t *testing.T) {
	lad := si.Routes{Primary: "gpt-4-0314", Fallbacks: []string{"gpt-4o"}}
	sc := scenario{name: "primary withdrawn, fallback 503 for 5 min", routes: lad, cfg: llmConfig, agents: []string{"a"}, gap: 30 * time.Second, d: 72 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				switch {
				case model == "gpt-4-0314":
					return answer{reply: withdrawn, latency: 40 * time.Millisecond}
				case t.Before(start.Add(5 * time.Minute)):
					return answer{reply: overloaded, latency: 50 * time.Millisecond}
				}
				return fine(600 * time.Millisecond)
			}
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	dead := lr.p.count(func(r request) bool { return r.model == "gpt-4-0314" })
	if dead > 20 {
		t.Errorf("%d requests to the withdrawn model over 3 days, want at most 20", dead)
	}
	last := figuresOf(lr.outs, between(simStart, 48*time.Hour, 72*time.Hour), "")
	if last.success < 0.99 {
		t.Errorf("last day: %.2f%% success, want at least 99%%", 100*last.success)
	}
	t.Logf("%d requests to the withdrawn model; last day %.2f%% success", dead, 100*last.success)
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// Four agents of one account run out of quota for 24 hours.
func TestScenarioQuotaExhausted(t *testing.T) {
	agents := []string{"billing", "search", "support", "writer"}
	sc := scenario{name: "quota exhausted, 4 agents, 24 h", routes: ladder, cfg: llmConfig, agents: agents, gap: 10 * time.Second, d: 24 * time.Hour,
		script: func(time.Time) script {
			return func(string, time.Time) answer { return answer{reply: noQuota, latency: 30 * time.Millisecond} }
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	l := lr.sys.l
	causes := l.Events(si.EventFilter{Types: []si.EventType{si.EventAccountCause}})
	if len(causes) != 1 || causes[0].Time.After(simStart.Add(time.Hour)) {
		t.Errorf("account-wide cause events: %+v; want one within the first hour", causes)
	}
	props := l.Proposals(nil)
	if len(props) != 1 || props[0].Class != failure.ClassQuota || props[0].Created.After(simStart.Add(time.Hour)) {
		t.Errorf("proposals %+v; want one, for the quota, within the first hour", props)
	}
	every := time.Minute // ProbePolicy.Every's default
	for _, a := range agents {
		var last time.Time
		n := 0
		lr.p.mu.Lock()
		for _, r := range lr.p.reqs {
			if r.key != "sk-"+a || r.at.Before(simStart.Add(time.Hour)) {
				continue
			}
			if !last.IsZero() && r.at.Sub(last) < every {
				t.Errorf("agent %s: requests at %v and %v, closer than the probe interval %v", a, last, r.at, every)
			}
			last = r.at
			n++
		}
		lr.p.mu.Unlock()
		t.Logf("agent %s: %d requests after the first hour", a, n)
		for _, ch := range l.Changes(a) {
			if ch.From.Route != ch.To.Route {
				t.Errorf("agent %s: route flipped %q → %q", a, ch.From.Route, ch.To.Route)
			}
		}
	}
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// The primary slows from 2 s to 8 s for 2 hours, under a 5 s timeout.
func TestScenarioSlowPrimary(t *testing.T) {
	const from, to = time.Hour, 3 * time.Hour
	cfg := si.Config{MaxAttempts: 3, Timeout: 5 * time.Second}
	sc := scenario{name: "primary slow (2 s → 8 s) for 2 h, 5 s timeout", routes: ladder, cfg: cfg, agents: []string{"a"}, gap: 30 * time.Second, d: 6 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				if model == "gpt-4.1" && !t.Before(start.Add(from)) && t.Before(start.Add(to)) {
					return fine(8 * time.Second)
				}
				return fine(2 * time.Second)
			}
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	slow := figuresOf(lr.outs, between(simStart, from+10*30*time.Second, to), "")
	if slow.success < 0.90 {
		t.Errorf("slow hours after the first 10 calls: %.1f%% success, want at least 90%%", 100*slow.success)
	}
	t.Logf("slow hours: %.1f%% success", 100*slow.success)
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// For an hour, 40 % of calls meet a rate limit: a 429 with retry-after: 2,
// and 429s until those 2 seconds have passed.
func TestScenario429Storm(t *testing.T) {
	const gap = 30 * time.Second
	limited := func(start, t time.Time) (time.Time, bool) {
		slot := start.Add(t.Sub(start).Truncate(gap))
		on := t.Sub(start) < time.Hour && chance(slot.String()) < 0.4
		return slot.Add(2 * time.Second), on && t.Before(slot.Add(2*time.Second))
	}
	storm := apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4.1 in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 2s.",
		map[string]string{"retry-after": "2", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"})
	sc := scenario{name: "429 storm: 40 % of calls for 1 h, retry-after 2 s", routes: ladder, cfg: llmConfig, agents: []string{"a"}, gap: gap, d: 2 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				if _, on := limited(start, t); on && model == "gpt-4.1" {
					return answer{reply: storm, latency: 20 * time.Millisecond}
				}
				return fine(700 * time.Millisecond)
			}
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	f := figuresOf(lr.outs, between(simStart, 0, time.Hour), "")
	if f.success < 0.99 {
		t.Errorf("storm hour: %.2f%% success, want at least 99%%", 100*f.success)
	}
	// No request before its Retry-After: after a 429, the next request to
	// the limited model comes when the window has passed.
	lr.p.mu.Lock()
	for i := 1; i < len(lr.p.reqs); i++ {
		prev, r := lr.p.reqs[i-1], lr.p.reqs[i]
		if prev.status == 429 && r.model == prev.model && r.at.Before(prev.at.Add(2*time.Second)) {
			t.Errorf("request at %v, %v after a 429 that asked for 2s", r.at, r.at.Sub(prev.at))
		}
	}
	lr.p.mu.Unlock()
	t.Logf("storm hour: %.2f%% success", 100*f.success)
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// A healthy agent with 2 % random 503s for 3 days makes no route change.
func TestScenarioHealthyNoise(t *testing.T) {
	n := 0
	sc := scenario{name: "healthy, 2 % random 503s, 3 days", routes: ladder, cfg: llmConfig, agents: []string{"a"}, gap: 30 * time.Second, d: 72 * time.Hour,
		script: func(time.Time) script {
			return func(model string, t time.Time) answer {
				n++
				if chance(t.String()+model+string(rune(n))) < 0.02 {
					return answer{reply: overloaded, latency: 50 * time.Millisecond}
				}
				return fine(600 * time.Millisecond)
			}
		}}
	lr, br := sc.loop(t), sc.baseline(t)
	for _, ch := range lr.sys.l.Changes("a") {
		if ch.From.Route != ch.To.Route {
			t.Errorf("route change %q → %q: %s", ch.From.Route, ch.To.Route, ch.Reason)
		}
	}
	compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// TestZRouteTable prints the side-by-side table of the scenarios that ran
// (docs/performance.md#routes); with SI_ROUTE_TABLE set, it writes it to
// that file as well.
func TestZRouteTable(t *testing.T) {
	table.mu.Lock()
	defer table.mu.Unlock()
	out := "| scenario | selfimprove success | baseline success | selfimprove requests/call | baseline requests/call |\n|---|---|---|---|---|\n" + strings.Join(table.rows, "\n") + "\n"
	t.Log("\n" + out)
	if f := os.Getenv("SI_ROUTE_TABLE"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func slicesAny[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}
