package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// The quick start: wrap an agent call. The loop runs it under the agent's
// current config and tracks how the agent does.
func Example() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)

	loop, err := selfimprove.New(selfimprove.WithDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()

	answer, rep, err := selfimprove.Execute(context.Background(), loop, "support-bot",
		func(ctx context.Context, cfg selfimprove.Config) (string, error) {
			// Call your model or tool here, using cfg.Route and cfg.Params;
			// ctx carries cfg.Timeout as its deadline.
			return "Your order ships tomorrow.", nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer)
	fmt.Printf("success=%v attempts=%d config=v%d\n", rep.Success, rep.Attempts, rep.ConfigVersion)
	s := loop.Stats("support-bot")
	fmt.Printf("calls=%d success rate=%.0f%% profile=%s\n", s.Calls, 100*s.SuccessRate, s.Profile)
	// Output:
	// Your order ships tomorrow.
	// success=true attempts=1 config=v1
	// calls=1 success rate=100% profile=low
}

// A custom strategy: when the recent failures are timeouts, double the
// timeout. The loop applies the tweak as config v2 and enforces it.
func ExampleStrategyFunc() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)

	raiseTimeout := selfimprove.StrategyFunc(func(ctx context.Context, a selfimprove.Analysis) (*selfimprove.Tweak, error) {
		for _, f := range a.Failures {
			if f.Err != context.DeadlineExceeded.Error() {
				return nil, nil // not all timeouts: no change
			}
		}
		next := a.Config
		next.Timeout *= 2
		return &selfimprove.Tweak{Config: next, Reason: "timeouts: double the timeout"}, nil
	})
	loop, err := selfimprove.New(
		selfimprove.WithDir(dir),
		selfimprove.WithStrategy(raiseTimeout),
		selfimprove.WithDefaultConfig(selfimprove.Config{Timeout: 50 * time.Millisecond}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()

	// A new agent is not re-configured before its first 10 calls
	// (RollbackPolicy.MinBeforeCalls): the upstream was fast for those.
	// With 10 calls a day, the agent's threshold is 3 failures.
	for range 10 {
		loop.ExecuteWithImprovement(context.Background(), "search", func(context.Context, selfimprove.Config) error { return nil })
	}
	slowUpstream := func(ctx context.Context, cfg selfimprove.Config) error {
		if cfg.Timeout < 100*time.Millisecond {
			return context.DeadlineExceeded // the upstream needs 80ms
		}
		return nil
	}
	for range 4 {
		rep, err := loop.ExecuteWithImprovement(context.Background(), "search", slowUpstream)
		fmt.Printf("v%d err=%v", rep.ConfigVersion, err)
		if c := rep.Improvement; c != nil {
			fmt.Printf(" -> applied v%d (timeout %v): %s", c.To.Version, c.To.Timeout, c.Reason)
		}
		fmt.Println()
	}
	// Output:
	// v1 err=context deadline exceeded
	// v1 err=context deadline exceeded
	// v1 err=context deadline exceeded -> applied v2 (timeout 100ms): timeouts: double the timeout
	// v2 err=<nil>
}

// A tweak that makes things worse is rolled back by the verification
// test, and the loop never applies it again. Three failures began the
// fault, so the reference is uncertain (about 50 %): it takes 9 failures
// under the tweak to be sure.
func ExampleRollbackPolicy() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)

	switchRoute := selfimprove.StrategyFunc(func(ctx context.Context, a selfimprove.Analysis) (*selfimprove.Tweak, error) {
		return &selfimprove.Tweak{Config: selfimprove.Config{Route: "cheap-model"}, Reason: "try the cheap model"}, nil
	})
	loop, err := selfimprove.New(
		selfimprove.WithDir(dir),
		selfimprove.WithStrategy(switchRoute),
		selfimprove.WithRollbackPolicy(selfimprove.RollbackPolicy{}), // the defaults: MethodQuick, 5 in a row
	)
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()

	errFlaky := errors.New("search tool failed")
	calls := 0
	agent := func(ctx context.Context, cfg selfimprove.Config) error {
		calls++
		if cfg.Route == "cheap-model" || calls <= 3 {
			return errFlaky // the cheap model always fails
		}
		return nil
	}
	// A new agent is not re-configured before its first 10 calls
	// (RollbackPolicy.MinBeforeCalls); with 10 calls a day, its threshold
	// is 3 failures.
	for range 10 {
		loop.ExecuteWithImprovement(context.Background(), "writer", func(context.Context, selfimprove.Config) error { return nil })
	}
	for range 13 {
		rep, _ := loop.ExecuteWithImprovement(context.Background(), "writer", agent)
		switch {
		case rep.Improvement != nil:
			fmt.Printf("applied v%d: %s\n", rep.Improvement.To.Version, rep.Improvement.Reason)
		case rep.Rollback != nil:
			fmt.Printf("rolled back v%d to v%d: %s\n", rep.Rollback.To.Version, rep.Rollback.From.Version, rep.Rollback.Verdict)
		default:
			fmt.Printf("v%d success=%v\n", rep.ConfigVersion, rep.Success)
		}
	}
	// Output:
	// v1 success=false
	// v1 success=false
	// applied v2: try the cheap model
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// v2 success=false
	// rolled back v2 to v1: all 9 calls under v2 failed, as did all 3 before: it fixed nothing; quick test: success 0.0% against a reference of 53.5% (3 calls since the fault began, fewer than 10, completed with 7 at the analysis window's 76.9%); the likelihood ratio for a fall to 33.5% reached 25.0 (limit 19.6)
	// v1 success=true
}

// The built-in strategy fixes what is safe to fix (here, rate limits:
// more backoff and one more attempt) and files a proposal for what needs a
// person (here, a bad API key), which Approve or Reject then decides.
func ExampleBuiltinStrategy() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)
	loop, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil),
		selfimprove.WithStrategy(&selfimprove.BuiltinStrategy{MaxAttempts: 3}))
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()
	ctx := context.Background()
	call := func(agent string, err error) {
		loop.ExecuteWithImprovement(ctx, agent, func(context.Context, selfimprove.Config) error { return err })
	}

	for range 10 { // a new agent is not re-configured before its first 10 calls
		call("search", nil)
		call("billing", nil)
	}
	for range 3 { // the third crosses the threshold (3 failures at 10 calls a day)
		call("search", errors.New("429 Too Many Requests"))
	}
	c := loop.Config("search")
	fmt.Printf("search: v%d backoff=%v attempts=%d\n", c.Version, c.Backoff, c.MaxAttempts)

	for range 3 {
		call("billing", errors.New("401 Unauthorized: invalid API key"))
	}
	for _, p := range loop.Proposals(nil) {
		fmt.Printf("%s: %s proposal (%s, %s): %s\n", p.AgentID, p.Status, p.Class, p.RootCause, p.Rule)
		if err := loop.Reject(p.ID, "keys are rotated on Monday"); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(loop.Proposals(nil)[0].Status)
	// Output:
	// search: v2 backoff=1s attempts=3
	// billing: pending proposal (auth, tool_failure): Check the credentials the agent uses: the API key or token is missing, invalid, expired, or lacks a permission.
	// rejected
}

// A timeout fix that turns timeouts into slower successes: the seed's
// rule rolls it back for its latency, the default policy keeps it.
func ExampleRollbackPolicy_Decide() {
	ms := time.Millisecond
	e := selfimprove.Evidence{
		// Since the fault began: 3 calls, all timed out at 150ms.
		Before: selfimprove.Stats{Calls: 3, Failures: 3, TotalLatency: 450 * ms},
		// The analysis window: mostly last week's 100ms successes.
		Window: selfimprove.Stats{Calls: 53, Failures: 3, TotalLatency: 5450 * ms},
		// Under the raised timeout: 12 successes at 200ms.
		After: selfimprove.Stats{Calls: 12, TotalLatency: 2400 * ms},
	}
	fmt.Println("default:   ", selfimprove.RollbackPolicy{}.Decide(e).Decision)
	fmt.Println("sequential:", selfimprove.RollbackPolicy{Method: selfimprove.MethodSequential}.Decide(e).Decision)

	seed := e
	seed.Before = e.Window // the seed compares with the whole window
	v := selfimprove.RollbackPolicy{SeedCompatible: true}.Decide(seed)
	fmt.Println("seed:      ", v.Decision, "-", v.Reason)
	// Output:
	// default:    confirm
	// sequential: confirm
	// seed:       rollback - calls under the change were slower: 200ms on average, against 102.83ms before; average latency rose 94.5%, more than 20%
}

// The failure memory finds a past failure that looks like a new one, with
// the fixes tried for it and how they ended.
func ExampleLoop_Similar() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)
	raiseTimeout := selfimprove.StrategyFunc(func(ctx context.Context, a selfimprove.Analysis) (*selfimprove.Tweak, error) {
		c := a.Config
		c.Timeout = 2 * time.Second
		return &selfimprove.Tweak{Config: c, Reason: "raise the timeout to 2s"}, nil
	})
	loop, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithStrategy(raiseTimeout))
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()

	ctx := context.Background()
	timeout := errors.New(`Post "https://search.example/v1/query?id=77": context deadline exceeded`)
	for i := range 23 { // 10 calls first; then 3 failures apply the tweak, 10 successes confirm it
		loop.ExecuteWithImprovement(ctx, "search", func(context.Context, selfimprove.Config) error {
			if i >= 10 && i < 13 {
				return timeout
			}
			return nil
		})
	}
	for _, m := range loop.Similar(`Post "https://search.example/v1/query?id=9182": context deadline exceeded`, 1) {
		fmt.Printf("%s (%s, similarity %.2f), seen on %v\n", m.Signature, m.Class, m.Similarity, m.Agents)
		for _, f := range m.Fixes {
			fmt.Printf("  %s on %s: %s\n", f.State, f.AgentID, f.Reason)
		}
	}
	// Output:
	// post <str>: context deadline exceeded (timeout, similarity 1.00), seen on [search]
	//   confirmed on search: raise the timeout to 2s
}

// Two replicas share one fleet: a config set through one is in force on
// the other at once, under the same version.
func ExampleWithFleet() {
	fleet := fleettest.New(nil)
	a, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithFleet(fleet), selfimprove.WithNotifier(nil))
	defer a.Close()
	b, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithFleet(fleet), selfimprove.WithNotifier(nil))
	defer b.Close()

	ok := func(context.Context, selfimprove.Config) error { return nil }
	a.ExecuteWithImprovement(context.Background(), "writer", ok)
	b.ExecuteWithImprovement(context.Background(), "writer", ok)
	a.SetConfig("writer", selfimprove.Config{Route: "fast-model"})

	rep, _ := b.ExecuteWithImprovement(context.Background(), "writer", ok)
	fmt.Println(rep.ConfigVersion, b.Config("writer").Route)
	// Counts go to the fleet in batches; SyncFleet sends them now.
	a.SyncFleet(context.Background())
	b.SyncFleet(context.Background())
	fmt.Println(b.Stats("writer").TotalCalls)
	// Output:
	// 2 fast-model
	// 3
}
