package replica

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestCut: which failed operation says the fleet is slow rather than down
// (Cut). Only an operation left half the timeout or less can; it is slow
// when its deadline passed, or when the answer came within the reply
// allowance before it (redisfleet's "too late": Redis ran the commit past
// the deadline it was given), and down when it failed at once (a refused
// connection) or had more than half the timeout.
func TestCut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	down := fmt.Errorf("%w: connection refused", ErrUnavailable)
	cases := []struct {
		name       string
		spent      time.Duration // of the chain before the operation
		answeredIn time.Duration // the operation's
		slow       bool
	}{
		{"short, deadline passed", 60 * time.Millisecond, 40 * time.Millisecond, true},
		{"short, too late just before the deadline", 60 * time.Millisecond, 37 * time.Millisecond, true},
		{"short, refused at once", 60 * time.Millisecond, 0, false},
		{"half the timeout, deadline passed", 50 * time.Millisecond, 50 * time.Millisecond, true},
		{"more than half, deadline passed", 30 * time.Millisecond, 70 * time.Millisecond, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fl := &Link{Timeout: timeout}
				w := fl.Chain(nil)
				time.Sleep(c.spent)
				ctx, done, ok := fl.Op(w)
				if !ok {
					t.Fatal("not tried")
				}
				defer done()
				time.Sleep(c.answeredIn)
				err := Cut(ctx, down)
				if got := errors.Is(err, ErrSlow); got != c.slow || !errors.Is(err, ErrUnavailable) {
					t.Errorf("cut: %v (slow %v), want slow %v, wrapping ErrUnavailable", err, got, c.slow)
				}
			})
		})
	}
}
