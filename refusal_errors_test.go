package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// A task whose budget is spent fails with an error the caller can test
// for, through the wrapping of the task's own function, as it can test for
// ErrCircuitOpen. Before, the refusal's error was unexported: the only way
// to tell a spent budget from the agent's failure was to match its text.
func TestSpentBudgetErrorMatchesErrBudgetSpent(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := si.WithBudget(context.Background(), &si.Budget{TaskAttempts: 2})
	_, err = l.ExecuteWithImprovement(ctx, "task", func(ctx context.Context, _ si.Config) error {
		for _, step := range []string{"plan", "tool", "answer"} {
			if _, err := l.ExecuteWithImprovement(ctx, step, func(context.Context, si.Config) error { return nil }); err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
		}
		return nil
	})
	if !errors.Is(err, si.ErrBudgetSpent) {
		t.Fatalf("the task's error %v is not ErrBudgetSpent", err)
	}
	if !strings.HasPrefix(err.Error(), "answer: selfimprove: budget spent") {
		t.Errorf("the task's error %q does not say which step the budget refused", err)
	}
}

// Scoring the Report.ID of a call that was not booked (its caller's
// context ended, so the ID is 0) says so, instead of calling 0 a call of
// another agent's with a horizon in nanoseconds. Before: "selfimprove:
// unknown call: ID 0000000000000000 is not a call of this agent's (or one
// older than 9h46m24.372088832s)".
func TestScoreOfAnIgnoredCallSaysItWasNotBooked(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ok := func(context.Context, si.Config) error { return nil }
	l.ExecuteWithImprovement(context.Background(), "bot", ok) // the agent is known
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, _ := l.ExecuteWithImprovement(ctx, "bot", func(ctx context.Context, _ si.Config) error { return ctx.Err() })
	if !rep.Ignored || rep.ID != 0 {
		t.Fatalf("a cancelled call: Ignored %v, ID %d", rep.Ignored, rep.ID)
	}
	err = l.Score("bot", rep.ID, 1)
	if !errors.Is(err, si.ErrUnknownCall) {
		t.Fatalf("Score of ID 0: %v, not ErrUnknownCall", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "ID 0 names no call") || !strings.Contains(msg, "not booked") {
		t.Errorf("Score of ID 0: %q does not say the call was not booked", msg)
	}
	err = l.Score("bot", 12345, 1)
	if !errors.Is(err, si.ErrUnknownCall) || !strings.HasSuffix(err.Error(), "(or one older than 9h46m0s)") {
		t.Errorf("Score of a made-up ID: %v", err)
	}
}
