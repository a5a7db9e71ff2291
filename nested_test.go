package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// steps are a task's steps, each an agent: a plan, three tool turns and
// an answer.
var steps = []string{"plan", "tool-1", "tool-2", "tool-3", "answer"}

// task runs one task as agent "task", each step a call nested in the
// task's attempt; fail says whether a step's attempt fails, with which
// error. It returns the requests made (the steps' attempts), the task's
// report and error.
func task(ctx context.Context, l *si.Loop, fail func(step string) error) (requests int, rep si.Report, err error) {
	rep, err = l.ExecuteWithImprovement(ctx, "task", func(ctx context.Context, _ si.Config) error {
		for _, s := range steps {
			if _, err := l.ExecuteWithImprovement(ctx, s, func(context.Context, si.Config) error {
				requests++
				return fail(s)
			}); err != nil {
				return err // passed on as it is
			}
		}
		return nil
	})
	return requests, rep, err
}

// TestTaskBudgetBoundsNestedRetries: an outer call that retries a task
// whose step keeps failing, each step retrying too, makes no more
// requests than the task budget allows; the outer call returns the step's
// error with BudgetExhausted, and the steps refused make no attempt and
// are not recorded. Without the budget, the retries multiply.
func TestTaskBudgetBoundsNestedRetries(t *testing.T) {
	e := newEnv(t)
	for _, id := range append([]string{"task"}, steps...) {
		if err := e.l.SetConfig(id, si.Config{MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	errDown := errors.New("tool-2: 503 service unavailable")
	fail := func(s string) error {
		if s == "tool-2" {
			return errDown
		}
		return nil
	}
	n, rep, err := task(context.Background(), e.l, fail)
	if n != 15 || rep.Attempts != 3 || rep.BudgetExhausted || err != errDown {
		t.Errorf("no budget: %d requests, %d outer attempts, exhausted %v, err %v; want 15 = 3 × (2 + 3), 3, false, the step's error",
			n, rep.Attempts, rep.BudgetExhausted, err)
	}
	b := &si.Budget{TaskAttempts: 5}
	n, rep, err = task(si.WithBudget(context.Background(), b), e.l, fail)
	if n != 5 || !rep.BudgetExhausted || err != errDown {
		t.Errorf("budget of 5: %d requests, exhausted %v, err %v; want 5, true, the step's error", n, rep.BudgetExhausted, err)
	}
	if got, want := rep.Attempts, 1; got != want {
		// plan, tool-1, tool-2 ×3: 5, and the budget refuses the retry.
		t.Errorf("budget of 5: %d outer attempts, want %d", got, want)
	}
	if used, _ := b.Spent(); b.Attempted() != 5 || used != 0 {
		t.Errorf("Attempted() = %d, want 5", b.Attempted())
	}
	if _, ex := b.Spent(); !ex {
		t.Error("the budget does not say it was exhausted")
	}
	if got := e.l.Stats("plan").TotalCalls; got != 4 {
		t.Errorf("plan recorded %d calls, want 4 (3 + 1: the refused call is not recorded)", got)
	}
}

// TestTaskBudgetCountsRequests: a task whose steps all succeed makes as
// many requests as it has steps, and a budget of exactly that many is
// enough: the outer call's attempt does not count, its steps do.
func TestTaskBudgetCountsRequests(t *testing.T) {
	e := newEnv(t)
	b := &si.Budget{TaskAttempts: len(steps)}
	n, rep, err := task(si.WithBudget(context.Background(), b), e.l, func(string) error { return nil })
	if err != nil || n != len(steps) || rep.BudgetExhausted || b.Attempted() != len(steps) {
		t.Fatalf("err %v, %d requests, exhausted %v, Attempted %d; want nil, %d, false, %d", err, n, rep.BudgetExhausted, b.Attempted(), len(steps), len(steps))
	}
	// The budget is spent: the next call is refused at once, fn not run.
	ran := false
	rep, err = e.l.ExecuteWithImprovement(si.WithBudget(context.Background(), b), "plan", func(context.Context, si.Config) error {
		ran = true
		return nil
	})
	if ran || err == nil || !rep.BudgetExhausted || rep.Attempts != 0 {
		t.Errorf("spent budget: ran %v, err %v, exhausted %v, attempts %d; want false, an error, true, 0", ran, err, rep.BudgetExhausted, rep.Attempts)
	}
}

// TestBudgetCostRefusesTheNextCall: a shared budget whose cost is spent
// refuses the task's next call before its first attempt.
func TestBudgetCostRefusesTheNextCall(t *testing.T) {
	e := newEnv(t)
	ctx := si.WithBudget(context.Background(), &si.Budget{Cost: 1})
	runs := 0
	for range 2 {
		e.l.ExecuteWithImprovement(ctx, "writer", func(ctx context.Context, _ si.Config) error {
			runs++
			si.AddCost(ctx, 1)
			return nil
		})
	}
	if runs != 1 {
		t.Errorf("fn ran %d times, want 1: the cost was spent by the first call", runs)
	}
}

// TestNestedFailureBelongsToTheInnerAgent: the task's failure that only
// passed on a step's error is counted for the task, but its cluster names
// the step, the failure memory and the shared causes do not count it for
// the task, and the error the task returns is the step's, unchanged.
func TestNestedFailureBelongsToTheInnerAgent(t *testing.T) {
	e := newEnv(t)
	if err := e.l.SetConfig("task", si.Config{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	errDown := &apiError{status: 503}
	for range 3 {
		_, _, err := task(context.Background(), e.l, func(s string) error {
			if s == "tool-2" {
				return errDown
			}
			return nil
		})
		var ae *apiError
		if err != error(errDown) || !errors.As(err, &ae) {
			t.Fatalf("the task returned %v (%T), want the step's error itself", err, err)
		}
	}
	if st := e.l.Stats("task"); st.Failures != 3 {
		t.Errorf("task: %d failures counted, want 3", st.Failures)
	}
	cs := e.l.Clusters("task")
	if len(cs) != 1 || cs[0].From != "tool-2" {
		t.Fatalf("task's clusters = %+v, want one, from tool-2", cs)
	}
	if own := e.l.Clusters("tool-2"); len(own) != 1 || own[0].From != "" || own[0].ID != cs[0].ID {
		t.Errorf("tool-2's clusters = %+v, want the same cluster, its own", own)
	}
	for _, m := range e.l.Similar(errDown.Error(), 1) {
		if fmt.Sprint(m.Agents) != "[tool-2]" {
			t.Errorf("the memory counts the cluster for %v, want tool-2 only", m.Agents)
		}
	}
	if sc := e.l.SharedCauses(); len(sc) != 0 {
		t.Errorf("shared causes = %+v, want none: the task only passed tool-2's failure on", sc)
	}
}

type apiError struct{ status int }

func (e *apiError) Error() string { return fmt.Sprintf("upstream: %d service unavailable", e.status) }

// TestNestedOuterNeverLearnsTheInnerFix: a critical task agent (one
// failure triggers its analysis) of one attempt and no budget, whose
// step's fix was confirmed, never takes that fix: its first failure that
// passed the step's error on looks nested and triggers nothing, and the
// next ones are told apart for sure.
func TestNestedOuterNeverLearnsTheInnerFix(t *testing.T) {
	e := newEnv(t, si.WithStrategy(&si.BuiltinStrategy{}))
	if err := e.l.MarkCritical("task", true); err != nil {
		t.Fatal(err)
	}
	errDown := errors.New("tool-2: 503 service unavailable")
	// tool-2 fails, learns one more attempt, and the fix is confirmed.
	for range 3 {
		e.call("tool-2", errDown, time.Second)
	}
	if e.l.Config("tool-2").MaxAttempts != 2 {
		t.Fatalf("tool-2 did not apply its fix: %+v", e.l.Config("tool-2"))
	}
	for range 12 {
		e.call("tool-2", nil, time.Second)
	}
	if ch := e.l.Changes("tool-2"); len(ch) != 1 || ch[0].State != si.ChangeConfirmed {
		t.Fatalf("tool-2's fix is not confirmed: %+v", ch)
	}
	for i := range 6 {
		_, rep, _ := task(context.Background(), e.l, func(s string) error {
			if s == "tool-2" {
				return errDown
			}
			return nil
		})
		if rep.ImprovementTriggered || rep.Improvement != nil {
			t.Fatalf("task %d: the task's analysis ran on tool-2's failure: %+v", i, rep.Improvement)
		}
	}
	if c := e.l.Config("task"); c.Version != 1 || len(e.l.Changes("task")) != 0 {
		t.Errorf("the task agent took a change: %+v", c)
	}
	if cs := e.l.Clusters("task"); len(cs) != 1 || cs[0].From != "tool-2" {
		t.Errorf("task's clusters = %+v, want one, from tool-2", cs)
	}
}

// TestNestedOwnFailureStillTriggers: a failure of the outer call's own
// (not a step's error) is the outer agent's, and its analysis runs.
func TestNestedOwnFailureStillTriggers(t *testing.T) {
	st := &tweakStrategy{}
	e := newEnv(t, si.WithStrategy(st))
	if err := e.l.MarkCritical("task", true); err != nil {
		t.Fatal(err)
	}
	errPlan := errors.New("plan: no steps")
	ctx := si.WithBudget(context.Background(), &si.Budget{TaskAttempts: 10})
	rep, err := e.l.ExecuteWithImprovement(ctx, "task", func(ctx context.Context, _ si.Config) error {
		e.l.ExecuteWithImprovement(ctx, "plan", func(context.Context, si.Config) error { return errBoom })
		return errPlan // the task's own: it does not pass the step's error on
	})
	if err != errPlan || !rep.ImprovementTriggered || st.count() != 1 {
		t.Fatalf("err %v, triggered %v, %d strategy runs; want the task's own failure analysed", err, rep.ImprovementTriggered, st.count())
	}
	if cs := st.seen[0].Clusters; len(cs) != 1 || cs[0].From != "" {
		t.Errorf("analysis clusters = %+v, want the task's own", cs)
	}
}

// TestScenarioNestedTasks reproduces issue 27's nested task: a task agent
// whose five steps are agents, one tool step failing transiently 30% of
// the time. The step learns its own fix (one more attempt) from its
// failures; the task agent, whose failures only passed the step's on,
// must not take it (on the old code it learned "attempts 1 → 3" from the
// failure memory). With a task budget of 5 requests, no task sends more.
func TestScenarioNestedTasks(t *testing.T) {
	for _, budget := range []int{0, 5, 7} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			worst, failed := nestedScenario(t, budget, 3000)
			t.Logf("task budget %d: worst task %d requests, %d of 3000 tasks failed", budget, worst, failed)
			if budget > 0 && worst > budget {
				t.Errorf("worst task: %d requests, want at most %d", worst, budget)
			}
		})
	}
}

// nestedScenario runs n tasks, one every 10 minutes, with a task budget
// of budget requests (0: none), and returns the most requests a task made
// and the tasks that failed. It fails the test if the task agent changed
// its config, or if tool-2 did not fix itself.
func nestedScenario(t *testing.T, budget, n int) (worst, failed int) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithDir(t.TempDir()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The step starts with two attempts; the task agent's threshold is 5
	// failures a day, so that the step's fix is confirmed (and
	// remembered) before the task agent's failures cross it.
	if err := l.SetConfig("tool-2", si.Config{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetThreshold("task", si.Threshold{Failures: 5, Window: 24 * time.Hour, Cooldown: 6 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(27, 7))
	errFlaky := errors.New("tool-2: 503 service unavailable")
	for range n {
		ctx := context.Background()
		if budget > 0 {
			ctx = si.WithBudget(ctx, &si.Budget{TaskAttempts: budget})
		}
		reqs, _, err := task(ctx, l, func(s string) error {
			clk.Advance(time.Second)
			if s == "tool-2" && rng.Float64() < 0.3 {
				return errFlaky
			}
			return nil
		})
		worst = max(worst, reqs)
		if err != nil {
			failed++
		}
		clk.Advance(10 * time.Minute)
	}
	if c, ch := l.Config("task"), l.Changes("task"); c.Version != 1 || len(ch) != 0 {
		t.Errorf("the task agent changed its config to %+v: %+v", c, ch)
	}
	if c := l.Config("tool-2"); c.MaxAttempts <= 2 {
		t.Errorf("tool-2 did not fix itself: %+v", c)
	}
	return worst, failed
}

// TestBuiltinStrategyLeavesNestedClusters: the built-in strategy given a
// cluster passed on from a nested call, and a confirmed fix for that
// cluster in the memory, proposes nothing; with a cluster of the agent's
// own, it works on that one and says the other was left to its agent.
func TestBuiltinStrategyLeavesNestedClusters(t *testing.T) {
	now := t0.Add(time.Hour)
	nested := si.Cluster{ID: "00000000000000aa", Class: "overloaded", Count: 5, LastSeen: now, From: "tool-2"}
	fix := si.Fix{AgentID: "tool-2", ChangeID: "c1", From: si.Config{MaxAttempts: 2}, To: si.Config{MaxAttempts: 3}, State: si.FixConfirmed, Time: t0}
	a := si.Analysis{
		AgentID: "task", Config: si.Config{Version: 1}, Threshold: si.Threshold{Failures: 3, Window: 24 * time.Hour},
		Stats:    si.Stats{ConsecutiveFailures: 5},
		Clusters: []si.Cluster{nested},
		Memories: []si.Memory{{Cluster: nested.ID, Class: "overloaded", Agents: []string{"tool-2"}, Fixes: []si.Fix{fix}, Similarity: 1, Confidence: 1}},
		Time:     now,
	}
	s := &si.BuiltinStrategy{}
	if tw, err := s.Analyze(context.Background(), a); err != nil || tw != nil {
		t.Fatalf("only a nested cluster: tweak %+v, err %v; want none", tw, err)
	}
	own := si.Cluster{ID: "00000000000000bb", Class: "network", Count: 2, LastSeen: now}
	a.Clusters = []si.Cluster{nested, own}
	tw, err := s.Analyze(context.Background(), a)
	if err != nil || tw == nil || tw.Cluster != own.ID || tw.Config.MaxAttempts != 2 {
		t.Fatalf("own network cluster: tweak %+v, err %v; want one more attempt for %s", tw, err, own.ID)
	}
	if want := `2 of the window's 2 failures are network; 5 more came from nested calls of "tool-2", left to them`; !strings.Contains(tw.Reason, want) {
		t.Errorf("reason %q lacks %q", tw.Reason, want)
	}
}

// TestNestedParallelSteps: steps run in parallel within one attempt of
// the task share its budget: exactly TaskAttempts of them run, and the
// task's failure is the failed step's.
func TestNestedParallelSteps(t *testing.T) {
	e := newEnv(t)
	b := &si.Budget{TaskAttempts: 4}
	var ran, refused atomic.Int64
	_, err := e.l.ExecuteWithImprovement(si.WithBudget(context.Background(), b), "task", func(ctx context.Context, _ si.Config) error {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				var rep si.Report
				rep, errs[i] = e.l.ExecuteWithImprovement(ctx, fmt.Sprintf("step-%d", i), func(context.Context, si.Config) error {
					ran.Add(1)
					return nil
				})
				if rep.BudgetExhausted {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if ran.Load() != 4 || refused.Load() != 4 || b.Attempted() != 4 || err == nil {
		t.Errorf("%d steps ran, %d refused, %d attempts counted, err %v; want 4, 4, 4, an error", ran.Load(), refused.Load(), b.Attempted(), err)
	}
}
