// Command nested runs a task whose steps are agents of their own, on a
// simulated clock, with no key and no network:
//
//	go run ./examples/nested
//
// The task (agent "task") makes a plan, three tool turns and an answer,
// each step a call of its own agent nested in the task's call. One tool
// fails now and then. The program shows a task budget bounding what one
// task may send, however the task's and its steps' retries combine, and
// the failing tool learning its own fix while the task agent, whose
// failures only passed the tool's on, leaves it to the tool.
//
// The program uses only the public package, so it can be copied into a
// module of your own as it is.
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
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// steps are the task's steps, each an agent.
var steps = []string{"plan", "tool-1", "tool-2", "tool-3", "answer"}

// budget is the task budget: the requests one task may send, its steps'
// retries included. Five steps leave room for two retries.
const budget = 7

var errFlaky = errors.New("tool-2: 503 service unavailable")

// clock is a simulated clock: a request takes a simulated second, and
// tasks come every 10 minutes, so that a day of tasks runs in
// milliseconds. It is safe for concurrent use, as the loop also reads its
// clock from background work.
type clock struct{ ns atomic.Int64 }

// Now returns the simulated time.
func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// advance moves the simulated time forward by d.
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// Sleep waits d on the simulated clock (the loop's waits between a call's
// attempts): it moves the time forward and returns at once.
func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.advance(d)
	return ctx.Err()
}

// app is the program's loop, its clock, and the tool that fails: fail
// says whether an attempt of tool-2 fails.
type app struct {
	loop  *selfimprove.Loop
	clock *clock
	fail  func() bool
}

// stepReport is what one step of a task did, in which of the task's
// attempts.
type stepReport struct {
	attempt int
	step    string
	rep     selfimprove.Report
}

// task runs one task under a fresh task budget: the task's call, whose
// function runs the steps as calls nested in it and passes a step's
// error on as it is. It returns the steps' reports, the requests sent,
// the budget, the task's report and error.
func (a *app) task() (done []stepReport, requests int, b *selfimprove.Budget, rep selfimprove.Report, err error) {
	b = &selfimprove.Budget{TaskAttempts: budget}
	ctx := selfimprove.WithBudget(context.Background(), b)
	rep, err = a.loop.ExecuteWithImprovement(ctx, "task", func(ctx context.Context, _ selfimprove.Config) error {
		attempt, _ := selfimprove.AttemptInfo(ctx)
		for _, s := range steps {
			srep, err := a.loop.ExecuteWithImprovement(ctx, s, func(context.Context, selfimprove.Config) error {
				requests++
				a.clock.advance(time.Second)
				if s == "tool-2" && a.fail() {
					return errFlaky
				}
				return nil
			})
			done = append(done, stepReport{attempt.Number, s, srep})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return done, requests, b, rep, err
}

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, the loop's state in memory.
func run(w io.Writer) error {
	clk := &clock{}
	clk.ns.Store(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC).UnixNano())
	loop, err := selfimprove.New(
		selfimprove.WithStore(selfimprove.NewRAMStore()),
		selfimprove.WithClock(clk),
		selfimprove.WithNotifier(nil),
		selfimprove.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		// The transient floor is off, so that each step makes the
		// attempts of its own config, the ones this example counts.
		selfimprove.WithRetryPolicy(selfimprove.RetryPolicy{TransientAttempts: 1}),
	)
	if err != nil {
		return err
	}
	defer loop.Close()
	// The task is retried once when it fails; the flaky tool starts with
	// two attempts a call, the other steps with one.
	if err := loop.SetConfig("task", selfimprove.Config{MaxAttempts: 2}); err != nil {
		return err
	}
	if err := loop.SetConfig("tool-2", selfimprove.Config{MaxAttempts: 2}); err != nil {
		return err
	}
	a := &app{loop: loop, clock: clk}

	fmt.Fprintf(w, "A task: %s, each step an agent. The task may make 2 attempts, and so\n", strings.Join(steps, ", "))
	fmt.Fprintf(w, "may tool-2, each time the task runs it; a task budget of %d requests bounds them together.\n\n", budget)
	failures := []bool{true, true, false} // tool-2 fails twice, then answers
	a.fail = func() bool {
		f := len(failures) > 0 && failures[0]
		failures = failures[min(len(failures), 1):]
		return f
	}
	done, requests, _, rep, _ := a.task()
	fmt.Fprintf(w, "One task, tool-2 failing twice, then answering:\n")
	for _, d := range done {
		fmt.Fprintf(w, "  attempt %d  %-7s %s\n", d.attempt, d.step, outcome(d.rep))
	}
	fmt.Fprintf(w, "  the task  %s; %d requests sent (9 without the budget)\n\n", outcome(rep), requests)

	rng := rand.New(rand.NewPCG(27, 7))
	a.fail = func() bool { return rng.Float64() < 0.3 }
	return many(w, a, 2000)
}

// many runs n tasks, one every 10 minutes, tool-2 failing 30% of its
// attempts, and says what they sent and what each agent learned.
func many(w io.Writer, a *app, n int) error {
	worst, failed, refused := 0, 0, 0
	for range n {
		_, requests, b, _, err := a.task()
		worst = max(worst, requests)
		if err != nil {
			failed++
			if _, spent := b.Spent(); spent {
				refused++
			}
		}
		a.clock.advance(10 * time.Minute)
	}
	fmt.Fprintf(w, "%d tasks, tool-2 failing 30%% of its attempts:\n", n)
	fmt.Fprintf(w, "  %d failed (%d of them when the budget ran out); the most requests a task sent: %d\n", failed, refused, worst)
	for _, id := range []string{"tool-2", "task"} {
		c := a.loop.Config(id)
		fmt.Fprintf(w, "  %-6s config v%d, %d attempt%s a call\n", id, c.Version, max(c.MaxAttempts, 1), plural(max(c.MaxAttempts, 1)))
		for _, ch := range a.loop.Changes(id) {
			fmt.Fprintf(w, "           change v%d→v%d %s: %s\n", ch.From.Version, ch.To.Version, ch.State, ch.Reason)
		}
		for _, cl := range a.loop.Clusters(id) {
			owner := "its own"
			if cl.From != "" {
				owner = "passed on from " + cl.From + ", left to it"
			}
			fmt.Fprintf(w, "           %d× %s in the window (%s): %q\n", cl.Count, cl.Class, owner, cl.Signature)
		}
	}
	return nil
}

// outcome describes a call's report in a few words.
func outcome(rep selfimprove.Report) string {
	switch {
	case rep.Success:
		return fmt.Sprintf("ok after %d attempt%s", rep.Attempts, plural(rep.Attempts))
	case rep.Attempts == 0:
		return "refused: " + rep.Err.Error()
	}
	s := fmt.Sprintf("failed after %d attempt%s: %v", rep.Attempts, plural(rep.Attempts), rep.Err)
	if rep.BudgetExhausted {
		s += " (budget spent)"
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
