package routesim

import (
	"hash/fnv"
	"slices"
	"strconv"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// simStart is when every scenario starts, on the simulated clock.
var simStart = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)

// llmConfig is the config docs/llm.md gives an agent: the SDK's retries
// off, the loop's on.
var llmConfig = si.Config{MaxAttempts: 3, Timeout: 30 * time.Second}

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
}

// run is one system's run of a scenario.
type run struct {
	p    *provider
	outs []outcome
	sys  *loopSystem // nil for the baseline
}

// loop runs sc through the loop.
func (s *sim) loop(t *testing.T, sc scenario) run {
	clk := fakeclock.New(simStart)
	p := newProvider(t, s.sdk, clk, sc.script(simStart))
	sys := newLoopSystem(t, p, sc.routes, sc.cfg)
	return run{p: p, outs: drive(p, sys, sc.agents, sc.gap, sc.d), sys: sys}
}

// baseline runs sc through the LiteLLM-like router, the ladder's models
// in order.
func (s *sim) baseline(t *testing.T, sc scenario) run {
	clk := fakeclock.New(simStart)
	p := newProvider(t, s.sdk, clk, sc.script(simStart))
	lad := append([]string{sc.routes.Primary}, sc.routes.Fallbacks...)
	return run{p: p, outs: drive(p, newLiteLLM(p, lad, sc.cfg.Timeout), sc.agents, sc.gap, sc.d)}
}

// all measures every call.
func all(time.Time) func(outcome) bool { return func(outcome) bool { return true } }

// between measures the calls in [from, to) after start.
func between(start time.Time, from, to time.Duration) func(outcome) bool {
	return func(o outcome) bool { return !o.at.Before(start.Add(from)) && o.at.Before(start.Add(to)) }
}

// primaryDown is the script of a provider whose primary gives the answer
// bad from from to to after the scenario's start; every other answer is
// a completion after 600 ms.
func primaryDown(primary string, from, to time.Duration, bad answer) func(start time.Time) script {
	return func(start time.Time) script {
		return func(model string, t time.Time) answer {
			if model == primary && !t.Before(start.Add(from)) && t.Before(start.Add(to)) {
				return bad
			}
			return fine(600 * time.Millisecond)
		}
	}
}

// overloadedPrimary: the primary is overloaded for 30 minutes while the
// fallback is healthy. Required: at least 90 % success after the
// outage's first 10 calls; back on the primary within 15 minutes of its
// recovery; at least 95 % of the rest of the day on it.
func (s *sim) overloadedPrimary(t *testing.T) {
	const from, to = 2 * time.Hour, 2*time.Hour + 30*time.Minute
	primary, fallback := s.sdk.Ladder.Primary, s.sdk.Ladder.Fallbacks[0]
	sc := scenario{name: "primary overloaded 30 min", routes: s.sdk.Ladder, cfg: llmConfig, agents: []string{"a"}, gap: 30 * time.Second, d: 24 * time.Hour,
		script: primaryDown(primary, from, to, answer{kind: Overloaded, latency: 50 * time.Millisecond})}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
	outage := figuresOf(lr.outs, between(simStart, from+10*30*time.Second, to), primary)
	if outage.success < 0.90 {
		t.Errorf("during the outage after its first 10 calls: %.1f%% success, want at least 90%%", 100*outage.success)
	}
	l := lr.sys.l
	back := time.Time{}
	for _, ch := range l.Changes("a") {
		if ch.To.Route == "" || ch.To.Route == primary {
			if ch.State == si.ChangeConfirmed && ch.AppliedAt.After(simStart.Add(to)) && back.IsZero() {
				back = ch.AppliedAt
			}
		}
	}
	if r := l.Config("a").Route; r != "" && r != primary {
		t.Errorf("the day ends on route %q, not the primary", r)
	}
	moved := slices.ContainsFunc(l.Changes("a"), func(ch si.Change) bool { return ch.To.Route == fallback })
	if moved && (back.IsZero() || back.Sub(simStart.Add(to)) > 15*time.Minute) {
		t.Errorf("back on the primary at %v, more than 15 minutes after its recovery at %v", back, simStart.Add(to))
	}
	rest := figuresOf(lr.outs, between(simStart, to+15*time.Minute, 24*time.Hour), primary)
	if rest.onPrimary < 0.95 {
		t.Errorf("%.1f%% of the rest of the day's calls on the primary, want at least 95%%", 100*rest.onPrimary)
	}
	t.Logf("outage: %.1f%% success; back on the primary %v after it recovered; %.1f%% of the rest of the day on it",
		100*outage.success, back.Sub(simStart.Add(to)), 100*rest.onPrimary)
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), primary), figuresOf(br.outs, all(simStart), primary))
}

// withdrawnPrimary: the primary is withdrawn; the fallback answers
// server errors for its first 5 minutes; 3 days. Required: at most 20
// requests to the withdrawn model; at least 99 % success on the last
// day.
func (s *sim) withdrawnPrimary(t *testing.T) {
	dead := s.sdk.Withdrawn
	lad := si.Routes{Primary: dead, Fallbacks: []string{s.sdk.Ladder.Fallbacks[0]}}
	sc := scenario{name: "primary withdrawn, fallback " + s.sdk.ServerError + " for 5 min", routes: lad, cfg: llmConfig, agents: []string{"a"}, gap: 30 * time.Second, d: 72 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				switch {
				case model == dead:
					return answer{kind: Withdrawn, latency: 40 * time.Millisecond}
				case t.Before(start.Add(5 * time.Minute)):
					return answer{kind: ServerError, latency: 50 * time.Millisecond}
				}
				return fine(600 * time.Millisecond)
			}
		}}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
	n := lr.p.count(func(r request) bool { return r.model == dead })
	if n > 20 {
		t.Errorf("%d requests to the withdrawn model over 3 days, want at most 20", n)
	}
	last := figuresOf(lr.outs, between(simStart, 48*time.Hour, 72*time.Hour), "")
	if last.success < 0.99 {
		t.Errorf("last day: %.2f%% success, want at least 99%%", 100*last.success)
	}
	t.Logf("%d requests to the withdrawn model; last day %.2f%% success", n, 100*last.success)
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// quotaExhausted: four agents of one account run out of quota for 24
// hours. Required: one alert (EventAccountCause) and one proposal within
// the first hour; then at most one request per agent per probe interval;
// no route flips.
func (s *sim) quotaExhausted(t *testing.T) {
	agents := []string{"billing", "search", "support", "writer"}
	sc := scenario{name: "quota exhausted, 4 agents, 24 h", routes: s.sdk.Ladder, cfg: llmConfig, agents: agents, gap: 10 * time.Second, d: 24 * time.Hour,
		script: func(time.Time) script {
			return func(string, time.Time) answer { return answer{kind: NoQuota, latency: 30 * time.Millisecond} }
		}}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
	l := lr.sys.l
	causes := l.Events(si.EventFilter{Types: []si.EventType{si.EventAccountCause}})
	if len(causes) != 1 || causes[0].Time.After(simStart.Add(time.Hour)) {
		t.Errorf("account-wide cause events: %+v; want one within the first hour", causes)
	}
	props := l.Proposals(nil)
	if len(props) != 1 || props[0].Class != failure.ClassQuota || props[0].Created.After(simStart.Add(time.Hour)) {
		t.Errorf("proposals %+v; want one, for the quota, within the first hour", props)
	}
	for _, a := range agents {
		n := probesApart(t, lr.p, a, simStart.Add(time.Hour), time.Minute) // ProbePolicy.Every's default
		t.Logf("agent %s: %d requests after the first hour", a, n)
		for _, ch := range l.Changes(a) {
			if ch.From.Route != ch.To.Route {
				t.Errorf("agent %s: route flipped %q → %q", a, ch.From.Route, ch.To.Route)
			}
		}
	}
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// probesApart checks that the requests of agent (its client's API key)
// from after on are at least every apart, and returns how many there are.
func probesApart(t *testing.T, p *provider, agent string, after time.Time, every time.Duration) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	n := 0
	for _, r := range p.reqs {
		if r.key != agentKey(agent) || r.at.Before(after) {
			continue
		}
		if !last.IsZero() && r.at.Sub(last) < every {
			t.Errorf("agent %s: requests at %v and %v, closer than the probe interval %v", agent, last, r.at, every)
		}
		last = r.at
		n++
	}
	return n
}

// slowPrimary: the primary slows from 2 s to 8 s for 2 hours, under a
// 5 s timeout, while the fallback is healthy. Required: at least 90 %
// success in the slow hours after their first 10 calls.
func (s *sim) slowPrimary(t *testing.T) {
	const from, to = time.Hour, 3 * time.Hour
	primary := s.sdk.Ladder.Primary
	cfg := si.Config{MaxAttempts: 3, Timeout: 5 * time.Second}
	sc := scenario{name: "primary slow (2 s → 8 s) for 2 h, 5 s timeout", routes: s.sdk.Ladder, cfg: cfg, agents: []string{"a"}, gap: 30 * time.Second, d: 6 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				if model == primary && !t.Before(start.Add(from)) && t.Before(start.Add(to)) {
					return fine(8 * time.Second)
				}
				return fine(2 * time.Second)
			}
		}}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
	slow := figuresOf(lr.outs, between(simStart, from+10*30*time.Second, to), "")
	if slow.success < 0.90 {
		t.Errorf("slow hours after the first 10 calls: %.1f%% success, want at least 90%%", 100*slow.success)
	}
	t.Logf("slow hours: %.1f%% success", 100*slow.success)
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// rateLimitStorm: for an hour, 40 % of calls meet a rate limit on the
// primary: a 429 with retry-after: 2, and 429s until those 2 seconds
// have passed. Required: at least 99 % success in the storm hour; no
// request before its Retry-After.
func (s *sim) rateLimitStorm(t *testing.T) {
	const gap = 30 * time.Second
	primary := s.sdk.Ladder.Primary
	limited := func(start, t time.Time) bool {
		slot := start.Add(t.Sub(start).Truncate(gap))
		return t.Sub(start) < time.Hour && chance(slot.String()) < 0.4 && t.Before(slot.Add(2*time.Second))
	}
	sc := scenario{name: "429 storm: 40 % of calls for 1 h, retry-after 2 s", routes: s.sdk.Ladder, cfg: llmConfig, agents: []string{"a"}, gap: gap, d: 2 * time.Hour,
		script: func(start time.Time) script {
			return func(model string, t time.Time) answer {
				if limited(start, t) && model == primary {
					return answer{kind: RateLimited, latency: 20 * time.Millisecond}
				}
				return fine(700 * time.Millisecond)
			}
		}}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
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
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}

// healthyNoise: a healthy agent meets 2 % random server errors for 3
// days. Required: no route change.
//
// The two systems draw the same numbers: the k-th request on a model
// within a call's slot fails in both or in neither, so that the
// comparison measures the systems, not the draw.
func (s *sim) healthyNoise(t *testing.T) {
	const gap = 30 * time.Second
	sc := scenario{name: "healthy, 2 % random " + s.sdk.ServerError + "s, 3 days", routes: s.sdk.Ladder, cfg: llmConfig, agents: []string{"a"}, gap: gap, d: 72 * time.Hour,
		script: func(start time.Time) script {
			seen := map[string]int{} // requests by slot and model
			return func(model string, t time.Time) answer {
				key := start.Add(t.Sub(start).Truncate(gap)).String() + " " + model
				seen[key]++
				if chance(strconv.Itoa(seen[key])+" "+key) < 0.02 {
					return answer{kind: ServerError, latency: 50 * time.Millisecond}
				}
				return fine(600 * time.Millisecond)
			}
		}}
	lr, br := s.loop(t, sc), s.baseline(t, sc)
	failed := func(r request) bool { return r.status >= 500 }
	t.Logf("server errors met: %d by the loop, %d by the baseline", lr.p.count(failed), br.p.count(failed))
	for _, ch := range lr.sys.l.Changes("a") {
		if ch.From.Route != ch.To.Route {
			t.Errorf("route change %q → %q: %s", ch.From.Route, ch.To.Route, ch.Reason)
		}
	}
	s.compare(t, sc.name, figuresOf(lr.outs, all(simStart), ""), figuresOf(br.outs, all(simStart), ""))
}
