// Command ab measures the loop against no loop: five scripted scenarios,
// each run with the self-improvement loop and without it (the same calls,
// the same static config enforced, no strategy), then a table of ten
// harder scenarios run without the loop and with it under each
// verification policy. A fake clock, fixed seeds, no network: the same
// figures on every run.
//
//	go run ./examples/ab
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Scenario timing (each agent's threshold: 3 failures in 10 minutes, 2
// minutes of cooldown): calls every 10 seconds; the fault begins at call
// faultAt and lasts to the end.
const (
	calls   = 300
	faultAt = 50
	every   = 10 * time.Second
)

// world is the simulated upstream of one run.
type world struct {
	clk   *fakeclock.Clock
	rng   *rand.Rand
	fault bool
	// attempt simulates one attempt of agent under cfg; it returns the
	// attempt's latency and error.
	attempt func(w *world, agent string, cfg si.Config) (time.Duration, error)
}

var (
	errRateLimit = errors.New("openai: 429 Too Many Requests: rate limit reached for requests")
	errModelGone = errors.New(`404 model_not_found: the model "writer-v1" does not exist or has been deprecated`)
	errOverload  = errors.New("upstream: 503 service unavailable: overloaded")
	errCheap     = errors.New(`cheap route: 400 bad request: invalid "tools" parameter`)
)

// scenario is one scripted fault.
type scenario struct {
	name     string
	agents   []string
	config   si.Config
	strategy func() si.Strategy
	// stagger delays the fault for each further agent by this many calls.
	stagger int
	attempt func(w *world, agent string, cfg si.Config) (time.Duration, error)
}

func builtin() si.Strategy { return &si.BuiltinStrategy{} }

// routes is every agent's route ladder: the primary, then the backup.
var routes = si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}

// harmful proposes a harmful tweak (the "cheap" route) on every other
// run, and the built-in strategy's tweak otherwise.
func harmful() si.Strategy {
	n := 0
	b := builtin()
	return si.StrategyFunc(func(ctx context.Context, a si.Analysis) (*si.Tweak, error) {
		n++
		if n%2 == 1 {
			c := a.Config
			c.Route = "cheap"
			return &si.Tweak{Config: c, Reason: "try the cheap route"}, nil
		}
		return b.Analyze(ctx, a)
	})
}

var scenarios = []scenario{
	{
		name: "an upstream starts rate limiting", agents: []string{"search"}, strategy: builtin,
		attempt: func(w *world, _ string, _ si.Config) (time.Duration, error) {
			if w.fault && w.rng.Float64() < 0.6 {
				return 20 * time.Millisecond, errRateLimit
			}
			return 300 * time.Millisecond, nil
		},
	},
	{
		name: "latency doubles past the timeout", agents: []string{"summarise"}, strategy: builtin,
		config: si.Config{Timeout: 150 * time.Millisecond},
		attempt: func(w *world, _ string, cfg si.Config) (time.Duration, error) {
			d := 100*time.Millisecond + time.Duration(w.rng.Int64N(int64(20*time.Millisecond)))
			if w.fault {
				d *= 2
			}
			if d > cfg.Timeout {
				return cfg.Timeout, context.DeadlineExceeded
			}
			return d, nil
		},
	},
	{
		name: "a model is withdrawn", agents: []string{"writer"}, strategy: builtin, config: si.Config{Route: "primary"},
		attempt: func(w *world, _ string, cfg si.Config) (time.Duration, error) {
			if w.fault && cfg.Route == "primary" {
				return 30 * time.Millisecond, errModelGone
			}
			return 400 * time.Millisecond, nil
		},
	},
	{
		name: "a strategy proposes a harmful tweak", agents: []string{"planner"}, strategy: harmful,
		attempt: func(w *world, _ string, cfg si.Config) (time.Duration, error) {
			if cfg.Route == "cheap" {
				return 50 * time.Millisecond, errCheap
			}
			if w.fault && w.rng.Float64() < 0.5 {
				return 80 * time.Millisecond, errOverload
			}
			return 250 * time.Millisecond, nil
		},
	},
	{
		// The outage reaches the second agent 50 calls later: by then the
		// first agent's confirmed fixes are in the failure memory.
		name: "two agents share an upstream outage", agents: []string{"billing", "support"}, strategy: builtin, stagger: 50,
		attempt: func(w *world, _ string, _ si.Config) (time.Duration, error) {
			if w.fault && w.rng.Float64() < 0.5 {
				return 60 * time.Millisecond, errOverload
			}
			return 200 * time.Millisecond, nil
		},
	},
}

// result is one run's figures.
type result struct {
	Calls, Successes, Attempts int
	// Recovered counts the calls from the fault's start to the first of
	// 10 consecutive successes, per agent; -1 if never.
	Recovered []int
	// Applied and RolledBack count the changes.
	Applied, RolledBack int
	// Harmful counts the harmful changes applied (the "cheap" route),
	// HarmfulRolledBack those rolled back, and HarmfulCalls the most calls
	// one of them ran for.
	Harmful, HarmfulRolledBack, HarmfulCalls int
	// Reapplied counts changes that repeated a rolled-back one.
	Reapplied int
}

func (r result) rate() float64 { return 100 * float64(r.Successes) / float64(r.Calls) }

// simulate runs sc with the loop (improve) or without it.
func simulate(sc scenario, improve bool) (result, error) {
	dir, err := os.MkdirTemp("", "selfimprove-ab")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	start0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	clk := fakeclock.New(start0)
	l, err := newLoop(sc, improve, dir, clk)
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	w := &world{clk: clk, rng: rand.New(rand.NewPCG(2026, 3)), attempt: sc.attempt}
	r := w.run(l, sc, start0)
	countChanges(&r, l, sc.agents)
	return r, nil
}

// newLoop opens the loop of a run of sc in dir on clk: with sc's strategy
// and the route ladder if improve, else with neither (the ladder's
// fallbacks and dead routes are the loop's too: a caller without it calls
// the model its config names).
func newLoop(sc scenario, improve bool, dir string, clk *fakeclock.Clock) (*si.Loop, error) {
	var strat si.Strategy
	ladder := si.Routes{}
	if improve {
		strat, ladder = sc.strategy(), routes
	}
	l, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0), si.WithRetryPolicy(si.RetryPolicy{JitterSeed: 2026, TransientAttempts: 1}),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithStrategy(strat), si.WithDefaultConfig(sc.config), si.WithRoutes(ladder))
	if err != nil {
		return nil, err
	}
	for _, agent := range sc.agents {
		// A run lasts 50 minutes: a threshold to match, where the
		// built-in profiles think in hours.
		if err := l.SetThreshold(agent, si.Threshold{Failures: 3, Window: 10 * time.Minute, Cooldown: 2 * time.Minute}); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// run makes the calls of sc's agents through l, a round every interval
// from start0, and returns the calls' figures.
func (w *world) run(l *si.Loop, sc scenario, start0 time.Time) result {
	r := result{Recovered: make([]int, len(sc.agents))}
	streak := make([]int, len(sc.agents))
	for i := range r.Recovered {
		r.Recovered[i] = -1
	}
	ctx := context.Background()
	for c := range calls {
		for ai, agent := range sc.agents {
			start := faultAt + ai*sc.stagger
			w.fault = c >= start
			rep, _ := l.ExecuteWithImprovement(ctx, agent, func(ctx context.Context, cfg si.Config) error {
				d, err := w.attempt(w, agent, cfg)
				w.clk.Advance(d)
				return err
			})
			r.Calls++
			r.Attempts += rep.Attempts
			if rep.Success {
				r.Successes++
				streak[ai]++
			} else {
				streak[ai] = 0
			}
			if w.fault && streak[ai] == 10 && r.Recovered[ai] < 0 {
				r.Recovered[ai] = c - start + 1 - 9
			}
		}
		// The next round starts on the round's own tick: the loop's
		// backoff jitter (random) moves calls within a round, never the
		// rounds themselves.
		w.clk.Advance(start0.Add(time.Duration(c+1) * every).Sub(w.clk.Now()))
	}
	return r
}

// countChanges adds the changes l made to agents to r: applied, rolled
// back, harmful, and reapplied after a rollback.
func countChanges(r *result, l *si.Loop, agents []string) {
	for _, agent := range agents {
		var rolledBack []si.Change
		for _, ch := range l.Changes(agent) {
			r.Applied++
			for _, rb := range rolledBack {
				if ch.To.Equal(rb.To) || (ch.To.Route == rb.To.Route && ch.From.Route != ch.To.Route) {
					r.Reapplied++
				}
			}
			harmful := ch.To.Route == "cheap"
			if harmful {
				r.Harmful++
			}
			if ch.State == si.ChangeRolledBack {
				rolledBack = append(rolledBack, ch)
				r.RolledBack++
				if harmful {
					r.HarmfulRolledBack++
					r.HarmfulCalls = max(r.HarmfulCalls, ch.After.Calls)
				}
			}
		}
	}
}

func harmfulCell(r result) string {
	if r.Harmful == 0 {
		return "none tried"
	}
	return fmt.Sprintf("%d of %d, ≤%d calls", r.HarmfulRolledBack, r.Harmful, r.HarmfulCalls)
}

func recovered(rs []int) string {
	var parts []string
	for _, n := range rs {
		if n < 0 {
			parts = append(parts, "never")
		} else {
			parts = append(parts, fmt.Sprint(n))
		}
	}
	return strings.Join(parts, ", ")
}

// run prints a table per scenario, then the policy table.
func run(out io.Writer) error {
	fmt.Fprintf(out, "%d calls per agent, one every %v; the fault begins at call %d and lasts.\n", calls, every, faultAt)
	fmt.Fprintf(out, "Without the loop: the same calls under the same static config, enforced, with no strategy.\n\n")
	for _, sc := range scenarios {
		with, err := simulate(sc, true)
		if err != nil {
			return err
		}
		without, err := simulate(sc, false)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s (%s)\n", sc.name, strings.Join(sc.agents, ", "))
		fmt.Fprintf(out, "  %-34s %12s %12s\n", "", "with loop", "without")
		fmt.Fprintf(out, "  %-34s %11.1f%% %11.1f%%\n", "success rate", with.rate(), without.rate())
		fmt.Fprintf(out, "  %-34s %12d %12d\n", "attempts", with.Attempts, without.Attempts)
		fmt.Fprintf(out, "  %-34s %12s %12s\n", "calls until recovered", recovered(with.Recovered), recovered(without.Recovered))
		fmt.Fprintf(out, "  %-34s %12s %12s\n", "tweaks applied, rolled back", fmt.Sprintf("%d, %d", with.Applied, with.RolledBack), "-")
		fmt.Fprintf(out, "  %-34s %12s %12s\n", "harmful tweaks rolled back", harmfulCell(with), "-")
		fmt.Fprintf(out, "  %-34s %12d %12s\n\n", "rolled-back tweaks re-applied", with.Reapplied, "-")
	}
	return table(out)
}
