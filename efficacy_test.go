package selfimprove_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Scenario tests: realistic upstream scripts driven through a real Loop on
// a fake clock with fixed seeds, each against the same upstream with no
// loop at all (the same calls under the same static config, no strategy).

var (
	err503 = errors.New("upstream: 503 service unavailable")
	err429 = errors.New("429 Too Many Requests: rate limit reached")
)

// upstream answers one attempt of agent at call i (counted per agent)
// under cfg: its latency and error.
type upstream func(rng *rand.Rand, agent string, i int, cfg si.Config) (time.Duration, error)

// fleet is a Loop (or none) driven through a script.
type fleet struct {
	clk    *fakeclock.Clock
	l      *si.Loop
	rng    *rand.Rand
	up     upstream
	agents []string
	// ok counts successes per agent and per call index; att, the
	// attempts fn made (0 for a call that failed fast).
	ok  map[string][]bool
	att map[string][]int
}

// newFleet opens a loop with the built-in strategy (improve) or none,
// with opts.
func newFleet(t *testing.T, improve bool, agents []string, up upstream, opts ...si.Option) *fleet {
	t.Helper()
	f := &fleet{clk: fakeclock.New(t0), rng: rand.New(rand.NewPCG(19, 2026)), up: up, agents: agents, ok: map[string][]bool{}, att: map[string][]int{}}
	var strat si.Strategy
	if improve {
		strat = &si.BuiltinStrategy{}
	}
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(f.clk), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(strat), si.WithFlushInterval(0), noFloor}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f.l = l
	return f
}

// run makes n rounds of one call per agent, a round every gap.
func (f *fleet) run(n int, gap time.Duration) {
	for range n {
		for _, a := range f.agents {
			i := len(f.ok[a])
			rep, _ := f.l.ExecuteWithImprovement(context.Background(), a, func(_ context.Context, cfg si.Config) error {
				d, err := f.up(f.rng, a, i, cfg)
				f.clk.Advance(d)
				return err
			})
			f.ok[a] = append(f.ok[a], rep.Success)
			f.att[a] = append(f.att[a], rep.Attempts)
		}
		f.clk.Advance(gap)
	}
}

// rate is the success rate of the agents' calls [from, to).
func (f *fleet) rate(from, to int) float64 {
	n, ok := 0, 0
	for _, a := range f.agents {
		for _, s := range f.ok[a][from:to] {
			n++
			if s {
				ok++
			}
		}
	}
	return float64(ok) / float64(n)
}

// changes counts the agents' changes, and those rolled back.
func (f *fleet) changes() (all, rolledBack int) {
	for _, a := range f.agents {
		for _, ch := range f.l.Changes(a) {
			all++
			if ch.State == si.ChangeRolledBack {
				rolledBack++
			}
		}
	}
	return all, rolledBack
}

// A shared outage across 20 agents leaves no scar: during it the
// built-in strategy holds (retries cannot help when nothing succeeds),
// so no tweak is applied, rolled back and refused; after it, a mild fault
// of the same kind is fixed by retries as on a fresh agent.
func TestScenarioSharedOutageLeavesNoScar(t *testing.T) {
	agents := make([]string, 20)
	for i := range agents {
		agents[i] = "agent-" + string(rune('a'+i))
	}
	const outageFrom, outageTo, end = 200, 230, 600
	up := func(rng *rand.Rand, _ string, i int, _ si.Config) (time.Duration, error) {
		switch {
		case i >= outageFrom && i < outageTo:
			return 20 * time.Millisecond, err503
		case i >= outageTo && rng.Float64() < 0.3:
			return 20 * time.Millisecond, err503
		case i < outageFrom && rng.Float64() < 0.01:
			return 20 * time.Millisecond, err503
		}
		return 100 * time.Millisecond, nil
	}
	with, without := newFleet(t, true, agents, up), newFleet(t, false, agents, up)
	with.run(end, time.Minute)
	without.run(end, time.Minute)
	all, rolled := with.changes()
	w, wo := with.rate(outageTo+100, end), without.rate(outageTo+100, end)
	t.Logf("mild fault after the outage: %.1f%% with the loop, %.1f%% without; %d changes, %d rolled back", 100*w, 100*wo, all, rolled)
	if rolled != 0 {
		t.Errorf("%d changes rolled back: the outage scarred the fleet", rolled)
	}
	if w < wo+0.15 {
		t.Errorf("after the outage, success %.1f%% with the loop, %.1f%% without: want retries to fix the mild fault", 100*w, 100*wo)
	}
}

// A new kind of fault during the cooldown of the last one is fixed as
// soon as on a fresh agent, not a whole cooldown (3 hours here) later.
func TestScenarioNewKindOfFaultSkipsTheCooldown(t *testing.T) {
	const first, second, end = 200, 240, 400
	up := func(rng *rand.Rand, _ string, i int, cfg si.Config) (time.Duration, error) {
		switch {
		case i >= second && cfg.Timeout > 0 && cfg.Timeout < 300*time.Millisecond:
			return cfg.Timeout, context.DeadlineExceeded // the upstream slowed to 300ms
		case i >= first && rng.Float64() < 0.4:
			return 20 * time.Millisecond, err503
		}
		if i >= second {
			return 280 * time.Millisecond, nil
		}
		return 100 * time.Millisecond, nil
	}
	cfg := si.WithDefaultConfig(si.Config{Timeout: 200 * time.Millisecond})
	f := newFleet(t, true, []string{"a"}, up, cfg)
	f.run(end, time.Minute)
	var fixedAt time.Duration = -1
	for _, ch := range f.l.Changes("a") {
		if ch.To.Timeout > ch.From.Timeout {
			fixedAt = ch.AppliedAt.Sub(t0.Add(second * time.Minute))
			break
		}
	}
	t.Logf("timeout raised %v after the second fault began", fixedAt)
	for _, ch := range f.l.Changes("a") {
		t.Logf("%v %s: %s: %s", ch.AppliedAt.Sub(t0), ch.State, ch.Reason, ch.Verdict)
	}
	if fixedAt < 0 || fixedAt > 20*time.Minute {
		t.Errorf("the second kind of fault was fixed %v after it began, want within 20 calls (20 minutes)", fixedAt)
	}
}

// The canary attributes only the difference between its arms: an
// outage that hits the change and the previous config alike is not
// blamed on the change.
func TestScenarioCanaryDoesNotBlameASharedFault(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{Method: si.MethodCanary, MinBeforeCalls: -1, CanarySeed: 3}))
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.calls("a", 20, nil, time.Millisecond)
	e.calls("a", 2, errBoom, time.Millisecond) // applies route b
	if e.l.Config("a").Route != "b" {
		t.Fatal("no change under verification")
	}
	e.calls("a", 20, nil, time.Millisecond)
	e.calls("a", 40, err503, time.Millisecond) // both arms down
	for _, ch := range e.l.Changes("a") {
		if ch.State == si.ChangeRolledBack {
			t.Fatalf("the change was rolled back for an outage on both arms: %s", ch.Verdict)
		}
	}
}

// A fix that turns rate-limit failures into slower successes (backoff
// and a retry) is kept: latency is compared on successful calls, and a
// significant rise of the success rate excuses a slower success.
func TestScenarioLatencyKeepsAFixThatWorks(t *testing.T) {
	const fault, end = 100, 300
	up := func(rng *rand.Rand, _ string, i int, _ si.Config) (time.Duration, error) {
		if i >= fault && rng.Float64() < 0.15 {
			return 20 * time.Millisecond, err429
		}
		return 100 * time.Millisecond, nil
	}
	with, without := newFleet(t, true, []string{"a"}, up), newFleet(t, false, []string{"a"}, up)
	with.run(end, time.Minute)
	without.run(end, time.Minute)
	_, rolled := with.changes()
	w, wo := with.rate(fault+50, end), without.rate(fault+50, end)
	t.Logf("rate limited: %.1f%% with the loop, %.1f%% without", 100*w, 100*wo)
	for _, ch := range with.l.Changes("a") {
		t.Logf("%s: %s", ch.State, ch.Verdict)
	}
	if rolled != 0 || w < wo+0.08 {
		t.Errorf("the backoff fix: %d rolled back, success %.1f%% with the loop vs %.1f%% without", rolled, 100*w, 100*wo)
	}
}

// A brand-new agent is not re-configured on its first failures, and no
// change is judged against a "before" of those failures alone.
func TestScenarioColdStart(t *testing.T) {
	up := func(rng *rand.Rand, _ string, i int, _ si.Config) (time.Duration, error) {
		if i < 2 || rng.Float64() < 0.05 {
			return 20 * time.Millisecond, err503
		}
		return 100 * time.Millisecond, nil
	}
	f := newFleet(t, true, []string{"a"}, up)
	f.run(3, time.Minute)
	if chs := f.l.Changes("a"); len(chs) != 0 || f.l.Config("a").Version != 1 {
		t.Fatalf("a new agent was re-configured on its first calls: %+v", chs)
	}
	f.run(500, time.Minute)
	for _, ch := range f.l.Changes("a") {
		if ch.Before.Calls < si.DefaultMinBeforeCalls && ch.State != si.ChangeVerifying && !containsAll(ch.Verdict, "completed with") {
			t.Errorf("change judged against %d calls before it, without saying so: %s", ch.Before.Calls, ch.Verdict)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Healthy agents stay quiet: at a constant 95 % or 80 % success (503s
// and the odd hung call, which fail every attempt of the call: noise no
// config can fix), under every policy, at most one config change per
// 1,000 calls, and success within half a point of no loop.
func TestScenarioHealthyAgentsStayQuiet(t *testing.T) {
	const n = 3000
	for _, rate := range []float64{0.95, 0.80} {
		up := func(_ *rand.Rand, agent string, i int, _ si.Config) (time.Duration, error) {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(agent[0]))) // the call's fate, whatever the attempt
			if rng.Float64() >= rate {
				if rng.Float64() < 0.02 {
					return 10 * time.Second, context.DeadlineExceeded // an occasional hung call
				}
				return 20 * time.Millisecond, err503
			}
			return 100 * time.Millisecond, nil
		}
		for _, p := range []struct {
			name string
			p    si.RollbackPolicy
		}{
			{"default", si.RollbackPolicy{}}, {"sequential", si.RollbackPolicy{Method: si.MethodSequential}},
			{"canary", si.RollbackPolicy{Method: si.MethodCanary}}, {"fixed", si.RollbackPolicy{Method: si.MethodFixed}},
		} {
			agents := []string{"a", "b", "c"}
			cfg := si.WithDefaultConfig(si.Config{Timeout: 10 * time.Second})
			with := newFleet(t, true, agents, up, si.WithRollbackPolicy(p.p), cfg)
			without := newFleet(t, false, agents, up, si.WithRollbackPolicy(p.p), cfg)
			with.run(n, time.Minute)
			without.run(n, time.Minute)
			all, _ := with.changes()
			w, wo := with.rate(0, n), without.rate(0, n)
			t.Logf("%.0f%% %s: %d changes in %d calls; success %.2f%% with the loop, %.2f%% without", 100*rate, p.name, all, n*len(agents), 100*w, 100*wo)
			if float64(all) > float64(n*len(agents))/1000 {
				t.Errorf("%.0f%% %s: %d config changes in %d calls, want at most 1 per 1,000", 100*rate, p.name, all, n*len(agents))
			}
			if w < wo-0.005 {
				t.Errorf("%.0f%% %s: success %.2f%% with the loop, %.2f%% without", 100*rate, p.name, 100*w, 100*wo)
			}
		}
	}
}
