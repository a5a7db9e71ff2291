package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// The policy table: harder scripts, one call a minute per agent, the
// built-in threshold profiles, each run without the loop and with it
// under each verification policy.

// policy is one column of the table.
type policy struct {
	name string
	p    si.RollbackPolicy
}

var policies = []policy{
	{"default", si.RollbackPolicy{}},
	{"sequential", si.RollbackPolicy{Method: si.MethodSequential}},
	{"canary", si.RollbackPolicy{Method: si.MethodCanary}},
	{"fixed", si.RollbackPolicy{Method: si.MethodFixed}},
}

// attempt is what an upstream script sees of one attempt.
type attempt struct {
	// agent and i are the agent's index and the call's, counted per agent.
	agent, i int
	cfg      si.Config
	// fate draws the same numbers on every attempt of a call: noise no
	// retry can fix. rnd draws this attempt's own numbers.
	fate, rnd *rand.Rand
}

// family is one row of the table.
type family struct {
	name   string
	agents int
	calls  int
	// from is the first call counted in the success rate (the calls
	// [from, calls) of every agent).
	from   int
	config si.Config
	// strategy defaults to the built-in one with the fallback route
	// "backup".
	strategy func() si.Strategy
	// quiet marks a scenario where the loop should stay quiet (cold
	// start, healthy agents): the table also shows its config changes per
	// 1,000 calls.
	quiet bool
	// before, when set, counts agent 0 alone, as a share of its success
	// rate over its calls [0, before).
	before int
	// breaker turns the circuit breaker on (with the loop only).
	breaker bool
	up      func(a attempt) (time.Duration, error)
	// trial, when set, draws another run of the same family: it enters
	// every call's seeds (0 is the table's run).
	trial uint64
}

var (
	err503 = errors.New("upstream: 503 service unavailable")
	err429 = errors.New("429 Too Many Requests: rate limit reached")
)

// healthy is an agent at a constant success rate: 503s and the odd hung
// call that fail every attempt of the call.
func healthy(rate float64) func(a attempt) (time.Duration, error) {
	return func(a attempt) (time.Duration, error) {
		if a.fate.Float64() >= rate {
			if a.fate.Float64() < 0.02 {
				return 10 * time.Second, context.DeadlineExceeded
			}
			return 20 * time.Millisecond, err503
		}
		return 100 * time.Millisecond, nil
	}
}

var families = []family{
	{
		// All 20 agents fail for 30 calls; then 30 % of attempts fail, which
		// retries fix. Counted: from 100 calls after the outage.
		name: "shared outage (20 agents), then a mild fault", agents: 20, calls: 600, from: 330,
		up: func(a attempt) (time.Duration, error) {
			switch {
			case a.i >= 200 && a.i < 230:
				return 20 * time.Millisecond, err503
			case a.i >= 230 && a.rnd.Float64() < 0.3:
				return 20 * time.Millisecond, err503
			case a.i < 200 && a.rnd.Float64() < 0.01:
				return 20 * time.Millisecond, err503
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		// All 20 agents fail for 60 calls (200–259); from call 400, 20 %
		// of agent 0's attempts fail, which one more attempt fixes.
		// Counted: agent 0 from call 450, as a share of its success
		// before the outage.
		name: "a later fault after a shared outage", agents: 20, calls: 750, from: 450, before: 200,
		up: outageThen(func(a attempt) bool { return a.agent == 0 && a.i >= 400 && a.rnd.Float64() < 0.2 }),
	},
	{
		// The same outage, with the circuit breaker on: counted from the
		// end of the outage.
		name: "after a shared outage, breaker on", agents: 20, calls: 500, from: 260, breaker: true,
		up: outageThen(func(attempt) bool { return false }),
	},
	{
		// 40 % of attempts fail with 503 from call 200; from call 240 the
		// upstream also slows to 280 ms, past the 200 ms timeout. Counted:
		// from call 240.
		name: "a new kind of fault during a cooldown", agents: 1, calls: 400, from: 240,
		config: si.Config{Timeout: 200 * time.Millisecond},
		up: func(a attempt) (time.Duration, error) {
			switch {
			case a.i >= 240 && a.cfg.Timeout > 0 && a.cfg.Timeout < 300*time.Millisecond:
				return a.cfg.Timeout, context.DeadlineExceeded
			case a.i >= 200 && a.rnd.Float64() < 0.4:
				return 20 * time.Millisecond, err503
			case a.i >= 240:
				return 280 * time.Millisecond, nil
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		// The primary route's model is withdrawn at call 100 (the fallback
		// route fixes it); from call 160 to 200 an outage fails both
		// routes, so the change and the config before it alike. Counted:
		// from call 100.
		name: "a fault on both canary arms", agents: 1, calls: 400, from: 100,
		config: si.Config{Route: "primary"},
		up: func(a attempt) (time.Duration, error) {
			switch {
			case a.i >= 160 && a.i < 200:
				return 20 * time.Millisecond, err503
			case a.i >= 100 && a.cfg.Route == "primary":
				return 30 * time.Millisecond, errModelGone
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		// From call 100, 15 % of attempts are rate limited: backoff and a
		// retry fix them, and make those calls slower. Counted: from call
		// 150.
		name: "a rate-limit fix that slows successes", agents: 1, calls: 300, from: 150,
		up: func(a attempt) (time.Duration, error) {
			if a.i >= 100 && a.rnd.Float64() < 0.15 {
				return 20 * time.Millisecond, err429
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		// A new agent's first 2 calls fail, then 5 % of attempts do.
		name: "cold start", agents: 1, calls: 500, quiet: true,
		up: func(a attempt) (time.Duration, error) {
			if a.i < 2 || a.rnd.Float64() < 0.05 {
				return 20 * time.Millisecond, err503
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		name: "healthy noisy agents at 95 %", agents: 3, calls: 3000, quiet: true,
		config: si.Config{Timeout: 10 * time.Second}, up: healthy(0.95),
	},
	{
		name: "healthy noisy agents at 80 %", agents: 3, calls: 3000, quiet: true,
		config: si.Config{Timeout: 10 * time.Second}, up: healthy(0.80),
	},
	{
		// From call 100, every 50 calls: 5 calls of a hard 503 outage, then
		// 45 calls where 20 % of attempts fail (retries fix those).
		// Counted: from call 100.
		name: "flapping 503s", agents: 3, calls: 600, from: 100,
		up: func(a attempt) (time.Duration, error) {
			switch {
			case a.i >= 100 && a.i%50 < 5:
				return 20 * time.Millisecond, err503
			case a.i >= 100 && a.rnd.Float64() < 0.2:
				return 20 * time.Millisecond, err503
			case a.i < 100 && a.rnd.Float64() < 0.01:
				return 20 * time.Millisecond, err503
			}
			return 100 * time.Millisecond, nil
		},
	},
	{
		// The share of failing attempts grows from 1 % to 31 % over the
		// run, and the latency from 100 to 200 ms.
		name: "slow degradation", agents: 3, calls: 600,
		up: func(a attempt) (time.Duration, error) {
			f := float64(a.i) / 600
			if a.rnd.Float64() < 0.01+0.3*f {
				return 20 * time.Millisecond, err503
			}
			return 100*time.Millisecond + time.Duration(f*float64(100*time.Millisecond)), nil
		},
	},
	{
		// From call 100, 40 % of attempts fail; the advisor proposes the
		// "cheap" route, which always fails, on every other run. Counted:
		// from call 100.
		name: "a harmful advisor", agents: 1, calls: 400, from: 100, strategy: harmful,
		up: harmfulUp(0.4, 1),
	},
	{
		// The same advisor over 10 agents whose upstream fails 10 % of
		// attempts from call 100; the "cheap" route fails 60 % of the
		// calls (a loss of 50 points).
		name: "a harmful advisor, 60 % fail (10 agents)", agents: 10, calls: 1500, from: 100, strategy: harmful,
		up: harmfulUp(0.1, 0.6),
	},
}

// outageThen is an upstream where 1 % of attempts fail, every attempt of
// calls 200–259, and those for which fault is true.
func outageThen(fault func(a attempt) bool) func(a attempt) (time.Duration, error) {
	return func(a attempt) (time.Duration, error) {
		switch {
		case a.i >= 200 && a.i < 260:
			return 20 * time.Millisecond, err503
		case fault(a) || a.rnd.Float64() < 0.01:
			return 20 * time.Millisecond, err503
		}
		return 100 * time.Millisecond, nil
	}
}

// harmfulUp is an upstream whose attempts fail at rate fault from call
// 100, and whose route "cheap" fails a share harm of the calls.
func harmfulUp(fault, harm float64) func(a attempt) (time.Duration, error) {
	return func(a attempt) (time.Duration, error) {
		switch {
		case a.cfg.Route == "cheap" && a.fate.Float64() < harm:
			return 50 * time.Millisecond, errCheap
		case a.i >= 100 && a.rnd.Float64() < fault:
			return 80 * time.Millisecond, errOverload
		}
		return 250 * time.Millisecond, nil
	}
}

// outcome is one run of a family.
type outcome struct {
	// Calls and Successes are counted over the calls [from, calls);
	// Before and BeforeOK over [0, before) (see family.before).
	Calls, Successes, Before, BeforeOK int
	// Changes counts every config change of the run, RolledBack those
	// rolled back; AllCalls is every call of the run.
	Changes, RolledBack, AllCalls int
	// Harmful counts the harmful changes (the route "cheap"),
	// HarmfulRolledBack those rolled back; HarmfulCalls sums the calls
	// each ran for before its rollback, and HarmfulMax is the most.
	Harmful, HarmfulRolledBack, HarmfulCalls, HarmfulMax int
	// HarmfulEach is the calls under each harmful change rolled back;
	// HarmfulKept counts those decided and kept (confirmed or
	// superseded), not those still verifying when the run ends.
	HarmfulEach []int
	HarmfulKept int
}

// rate is the success rate in per cent; with Before, as a share of the
// success rate over those calls.
func (o outcome) rate() float64 {
	r := 100 * float64(o.Successes) / float64(o.Calls)
	if o.Before > 0 {
		r = r * float64(o.Before) / float64(o.BeforeOK)
	}
	return r
}

// perThousand is the config changes per 1,000 calls.
func (o outcome) perThousand() float64 { return 1000 * float64(o.Changes) / float64(o.AllCalls) }

// play runs f without the loop (p nil) or with it under *p.
func play(f family, p *si.RollbackPolicy) (outcome, error) {
	start0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	clk := fakeclock.New(start0)
	// The transient floor (RetryPolicy.TransientAttempts) is off in both
	// arms: the table measures what the loop learns and verifies.
	opts := []si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0), si.WithRetryPolicy(si.RetryPolicy{JitterSeed: 2026, TransientAttempts: 1}),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithDefaultConfig(f.config)}
	if p != nil {
		// The ladder's fallbacks and dead routes are the loop's: without
		// it, a call goes to the model its config names.
		opts = append(opts, si.WithRoutes(routes))
		strat := builtin
		if f.strategy != nil {
			strat = f.strategy
		}
		opts = append(opts, si.WithStrategy(strat()), si.WithRollbackPolicy(*p))
		if f.breaker {
			opts = append(opts, si.WithCircuitBreaker(si.CircuitBreaker{}))
		}
	} else {
		opts = append(opts, si.WithStrategy(nil))
	}
	l, err := si.New(opts...)
	if err != nil {
		return outcome{}, err
	}
	defer l.Close()
	agents := make([]string, f.agents)
	for i := range agents {
		agents[i] = fmt.Sprintf("agent-%02d", i)
	}
	var o outcome
	ctx := context.Background()
	for c := range f.calls {
		for ai, agent := range agents {
			n := 0
			rep, _ := l.ExecuteWithImprovement(ctx, agent, func(ctx context.Context, cfg si.Config) error {
				seed := f.trial<<48 | uint64(ai)<<32 | uint64(c)
				n++
				d, err := f.up(attempt{agent: ai, i: c, cfg: cfg,
					fate: rand.New(rand.NewPCG(seed, 2026)), rnd: rand.New(rand.NewPCG(seed, uint64(n)))})
				clk.Advance(d)
				return err
			})
			o.AllCalls++
			o.count(f, ai, c, rep.Success)
		}
		// Each round starts on its own minute, whatever the calls took.
		clk.Advance(max(0, start0.Add(time.Duration(c+1)*time.Minute).Sub(clk.Now())))
	}
	for _, agent := range agents {
		for _, ch := range l.Changes(agent) {
			o.Changes++
			if ch.State == si.ChangeRolledBack {
				o.RolledBack++
			}
			if ch.To.Route == "cheap" {
				o.Harmful++
				if ch.State == si.ChangeRolledBack {
					o.HarmfulRolledBack++
					o.HarmfulCalls += ch.After.Calls
					o.HarmfulMax = max(o.HarmfulMax, ch.After.Calls)
					o.HarmfulEach = append(o.HarmfulEach, ch.After.Calls)
				} else if ch.State != si.ChangeVerifying {
					o.HarmfulKept++
				}
			}
		}
	}
	return o, nil
}

// count counts agent ai's call c, a success if ok.
func (o *outcome) count(f family, ai, c int, ok bool) {
	n := 0
	if ok {
		n = 1
	}
	switch {
	case f.before > 0 && ai != 0:
	case c >= f.from:
		o.Calls++
		o.Successes += n
	case c < f.before:
		o.Before++
		o.BeforeOK += n
	}
}

// row is one family's figures: without the loop, then per policy.
type row struct {
	without outcome
	with    []outcome
}

func playAll(f family) (row, error) {
	var r row
	var err error
	if r.without, err = play(f, nil); err != nil {
		return r, err
	}
	for _, p := range policies {
		o, err := play(f, &p.p)
		if err != nil {
			return r, err
		}
		r.with = append(r.with, o)
	}
	return r, nil
}

func cell(f family, o outcome) string {
	if f.quiet {
		return fmt.Sprintf("%.2f%% (%.1f)", o.rate(), o.perThousand())
	}
	return fmt.Sprintf("%.1f%%", o.rate())
}

// table prints the policy table.
func table(out io.Writer) error {
	fmt.Fprintf(out, "Per verification policy: success rate without the loop and with it; one call a minute per agent,\n")
	fmt.Fprintf(out, "the built-in threshold profiles. (n): config changes per 1,000 calls, in cold start and on healthy agents.\n\n")
	const w = 14
	fmt.Fprintf(out, "%-46s %*s", "", w, "no loop")
	for _, p := range policies {
		fmt.Fprintf(out, " %*s", w, p.name)
	}
	fmt.Fprintln(out)
	var harm []string
	for _, f := range families {
		r, err := playAll(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-46s %*s", f.name, w, cell(f, r.without))
		for _, o := range r.with {
			fmt.Fprintf(out, " %*s", w, cell(f, o))
		}
		fmt.Fprintln(out)
		if f.strategy != nil {
			line := fmt.Sprintf("%-46s %*s", f.name, w, "")
			for _, o := range r.with {
				line += fmt.Sprintf(" %*s", w, harmCell(o))
			}
			harm = append(harm, line)
		}
	}
	fmt.Fprintf(out, "\nHarmful tweaks: rolled back of applied, mean and most calls each ran before its rollback.\n\n")
	for _, line := range harm {
		fmt.Fprintln(out, line)
	}
	return nil
}

// harmCell is a policy's harmful tweaks: "rolled back/applied, mean/max".
func harmCell(o outcome) string {
	if o.Harmful == 0 {
		return "none"
	}
	return fmt.Sprintf("%d/%d, %.1f/%d", o.HarmfulRolledBack, o.Harmful, o.meanHarmful(), o.HarmfulMax)
}

// meanHarmful is the mean of the calls the harmful tweaks rolled back ran
// for.
func (o outcome) meanHarmful() float64 {
	if o.HarmfulRolledBack == 0 {
		return 0
	}
	return float64(o.HarmfulCalls) / float64(o.HarmfulRolledBack)
}
