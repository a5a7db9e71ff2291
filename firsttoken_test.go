package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/stream"
)

// stalls is a wrapped function whose stream never sends a token: it
// returns its context's error, which does not say why, and records the
// context's cause.
func stalls(cause *error) func(ctx context.Context, _ si.Config) error {
	return func(ctx context.Context, _ si.Config) error {
		<-ctx.Done()
		*cause = context.Cause(ctx)
		return ctx.Err()
	}
}

// streams is a wrapped function whose stream sends its first token after
// first and ends after total.
func streams(first, total time.Duration) func(ctx context.Context, _ si.Config) error {
	return func(ctx context.Context, _ si.Config) error {
		time.Sleep(first)
		stream.FirstToken(ctx)
		stream.FirstToken(ctx) // a second report changes nothing
		select {
		case <-time.After(total - first):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func TestFirstTokenTimeoutCancelsAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{FirstTokenTimeout: time.Second, Timeout: time.Minute, MaxAttempts: 2}))
		defer l.Close()
		var cause error
		var second si.Attempt
		ok := streams(100*time.Millisecond, 30*time.Second)
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			if a, retry := si.AttemptInfo(ctx); retry {
				second = a
				return ok(ctx, c)
			}
			return stalls(&cause)(ctx, c)
		})
		if err != nil || rep.Attempts != 2 {
			t.Fatalf("err %v, attempts %d: want a retry that succeeds", err, rep.Attempts)
		}
		if cause != failure.ErrFirstTokenTimeout {
			t.Errorf("the stalled attempt's cause = %v, want ErrFirstTokenTimeout", cause)
		}
		if second.LastClass != failure.ClassFirstTokenTimeout {
			t.Errorf("the retry saw class %q, want first_token_timeout", second.LastClass)
		}
		// The stall cost its first-token deadline, not the whole call's:
		// the retry's stream, longer than the deadline, ran to its end.
		if rep.Duration != time.Second+second.Waited+30*time.Second || second.Waited < 250*time.Millisecond || second.Waited > 500*time.Millisecond {
			t.Errorf("duration %v, want 1s (the stall) + the back-off (%v, 0.25 to 0.5 s) + 30s (the stream)", rep.Duration, second.Waited)
		}
		v, _ := l.View("a")
		if h := v.FirstToken; h.Count != 1 || h.Sum != 100*time.Millisecond || h.Counts[4] != 1 {
			t.Errorf("AgentView.FirstToken = %+v, want one of 100ms", h)
		}
	})
}

// A stall is recorded as first_token_timeout, whatever error fn returned,
// and the caller gets fn's error unchanged.
func TestFirstTokenStallIsItsOwnClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{FirstTokenTimeout: 2 * time.Second, Timeout: time.Minute}), noFloor)
		defer l.Close()
		var cause error
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", stalls(&cause))
		if !errors.Is(err, context.Canceled) || rep.Ignored || rep.Success || rep.Duration != 2*time.Second {
			t.Fatalf("rep %+v, err %v: want fn's context.Canceled after 2s, counted", rep, err)
		}
		cs := l.Clusters("a")
		if len(cs) != 1 || cs[0].Class != failure.ClassFirstTokenTimeout {
			t.Fatalf("clusters %+v, want one of class first_token_timeout", cs)
		}
		// An error that wraps the cause, as net/http's do, says it too.
		if c := failure.Classify(errors.Join(errors.New("read: "), failure.ErrFirstTokenTimeout)); c != failure.ClassFirstTokenTimeout {
			t.Errorf("Classify = %q", c)
		}
		if !errors.Is(failure.ErrFirstTokenTimeout, context.DeadlineExceeded) || failure.ClassFirstTokenTimeout.RootCause() != failure.RootCauseToolFailure {
			t.Error("ErrFirstTokenTimeout is not a deadline, or its class not a tool failure")
		}
	})
}

// A healthy stream longer than the first-token deadline, with a quick
// first token, succeeds; the whole call's Timeout still bounds it.
func TestFirstTokenTimeoutSparesALongStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{FirstTokenTimeout: time.Second, Timeout: 10 * time.Second}), noFloor)
		defer l.Close()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", streams(10*time.Millisecond, 5*time.Second))
		if err != nil || rep.Duration != 5*time.Second {
			t.Fatalf("rep %+v, err %v", rep, err)
		}
		if v, _ := l.View("a"); v.FirstToken.Count != 1 || v.FirstToken.Sum != 10*time.Millisecond {
			t.Errorf("FirstToken %+v, want one of 10ms", v.FirstToken)
		}
		rep, err = l.ExecuteWithImprovement(context.Background(), "a", streams(10*time.Millisecond, time.Minute))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, failure.ErrFirstTokenTimeout) || rep.Duration != 10*time.Second {
			t.Fatalf("a stream past Timeout: rep %+v, err %v", rep, err)
		}
		if cs := l.Clusters("a"); len(cs) != 1 || cs[0].Class != failure.ClassTimeout {
			t.Errorf("clusters %+v, want one timeout", cs)
		}
	})
}

// Without a FirstTokenTimeout nothing watches: a report does nothing, and
// a slow first token is no failure.
func TestNoFirstTokenTimeoutNoWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t)
		defer l.Close()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", streams(time.Minute, 2*time.Minute))
		if err != nil {
			t.Fatalf("rep %+v, err %v", rep, err)
		}
		if v, _ := l.View("a"); v.FirstToken.Count != 0 {
			t.Errorf("FirstToken = %+v, want none", v.FirstToken)
		}
		stream.FirstToken(context.Background()) // outside a call: nothing
	})
}

// A clock with AfterFunc arms the deadline: a simulated clock fires it
// when it advances.
func TestFirstTokenTimeoutOnTheClock(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l := looptest.NewLoop(t, si.WithClock(clk), si.WithDefaultConfig(si.Config{FirstTokenTimeout: 3 * time.Second, MaxAttempts: 2}))
	defer l.Close()
	started := make(chan struct{}, 2)
	var cause error
	done := make(chan si.Report)
	go func() {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			started <- struct{}{}
			if _, retry := si.AttemptInfo(ctx); retry {
				clk.Advance(250 * time.Millisecond)
				stream.FirstToken(ctx)
				clk.Advance(time.Hour) // disarmed: nothing fires
				return nil
			}
			return stalls(&cause)(ctx, c)
		})
		done <- rep
	}()
	<-started
	clk.Advance(2 * time.Second)
	clk.Advance(time.Second) // the deadline
	rep := <-done
	if cause != failure.ErrFirstTokenTimeout || rep.Attempts != 2 || !rep.Success {
		t.Fatalf("cause %v, rep %+v", cause, rep)
	}
	if v, _ := l.View("a"); v.FirstToken.Count != 1 || v.FirstToken.Sum != 250*time.Millisecond {
		t.Errorf("FirstToken %+v, want one of 250ms", v.FirstToken)
	}
	if n := clk.Timers(); n != 0 {
		t.Errorf("%d timers left armed", n)
	}
}

func TestFirstTokenTimeoutValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Hour + 1} {
		if _, err := si.New(si.WithDir(t.TempDir()), si.WithDefaultConfig(si.Config{FirstTokenTimeout: d})); !errors.Is(err, si.ErrInvalidOption) && !errors.Is(err, si.ErrInvalidConfig) {
			t.Errorf("FirstTokenTimeout %v: New = %v, want refused", d, err)
		}
	}
	c := si.Config{Version: 3, Timeout: time.Minute, FirstTokenTimeout: 1500 * time.Millisecond}
	b, _ := c.MarshalJSON()
	if string(b) != `{"version":3,"timeout":"1m0s","first_token_timeout":"1.5s"}` {
		t.Errorf("JSON %s", b)
	}
	var back si.Config
	if err := back.UnmarshalJSON(b); err != nil || back.FirstTokenTimeout != c.FirstTokenTimeout || !back.Equal(c) {
		t.Errorf("round trip %+v, %v", back, err)
	}
	if c.Equal(si.Config{Timeout: time.Minute}) {
		t.Error("configs that differ in FirstTokenTimeout are Equal")
	}
}

// Each attempt that reported its first token counts once: one that broke
// after it, and the retry that succeeded.
func TestFirstTokenCountedPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{FirstTokenTimeout: time.Second, MaxAttempts: 2}))
		defer l.Close()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
			a, _ := si.AttemptInfo(ctx)
			time.Sleep(time.Duration(a.Number) * 100 * time.Millisecond)
			stream.FirstToken(ctx)
			if a.Number == 1 {
				return errors.New("stream: unexpected EOF")
			}
			return nil
		})
		if err != nil || rep.Attempts != 2 {
			t.Fatalf("rep %+v, err %v", rep, err)
		}
		for v := range l.Views() {
			if v.FirstToken.Count != 2 || v.FirstToken.Sum != 300*time.Millisecond {
				t.Errorf("FirstToken %+v, want 100ms and 200ms", v.FirstToken)
			}
		}
	})
}
