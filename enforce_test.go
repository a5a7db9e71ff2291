package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

func TestTimeoutEnforcedPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{Timeout: 2 * time.Second, MaxAttempts: 3}))
		defer l.Close()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
			<-ctx.Done() // a hung upstream
			return ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || rep.Ignored || rep.Attempts != 3 {
			t.Fatalf("report = %+v, err = %v", rep, err)
		}
		// 3 attempts of 2 s, and the back-off between them: 0.5 s doubled,
		// with jitter (a timeout is retried as the LLM SDKs retry it).
		if d := rep.Duration; d < 6*time.Second+750*time.Millisecond || d > 6*time.Second+1500*time.Millisecond {
			t.Errorf("duration = %v, want 3 attempts of 2s and 0.75 to 1.5 s of back-off", d)
		}
		if s := l.Stats("a"); s.Failures != 1 || s.AvgLatency != rep.Duration {
			t.Errorf("stats = %+v, want one failed call of %v", s, rep.Duration)
		}
	})
}

func TestBackoffIsExponentialWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{Backoff: 100 * time.Millisecond, MaxAttempts: 4}))
		defer l.Close()
		var at []time.Time
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			at = append(at, time.Now())
			return errBoom
		})
		if rep.Attempts != 4 || len(at) != 4 {
			t.Fatalf("attempts = %d", rep.Attempts)
		}
		for i := 1; i < 4; i++ {
			d := 100 * time.Millisecond << (i - 1)
			if wait := at[i].Sub(at[i-1]); wait < d/2 || wait > d {
				t.Errorf("wait before attempt %d = %v, want in [%v, %v]", i+1, wait, d/2, d)
			}
		}
	})
}

// TestBackoffPastTheDeadlineReturnsAtOnce: a backoff wait that would
// pass the caller's deadline is not slept; the call returns fn's failure
// at once, booked as the agent's failure (fn failed while the caller's
// context was live). Before, the loop slept into the deadline and booked
// the call as ignored.
func TestBackoffPastTheDeadlineReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{Backoff: time.Minute, MaxAttempts: 5}))
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		rep, err := l.ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return errBoom })
		if !errors.Is(err, errBoom) || rep.Attempts != 1 || rep.Ignored {
			t.Fatalf("report = %+v, err = %v", rep, err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("returned after %v, want at once", d)
		}
		if st := l.Stats("a"); st.Failures != 1 || st.Ignored != 0 {
			t.Errorf("stats %+v, want one failure, none ignored", st)
		}
	})
}

// TestBackoffStopsWhenCallerLeaves: a caller that cancels during a
// backoff wait ends it; the call is ignored, not the agent's failure.
func TestBackoffStopsWhenCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{Backoff: time.Minute, MaxAttempts: 5}))
		defer l.Close()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		rep, err := l.ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return errBoom })
		if !errors.Is(err, errBoom) || rep.Attempts != 1 || !rep.Ignored {
			t.Fatalf("report = %+v, err = %v", rep, err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("returned after %v, want 1s (when the caller left)", d)
		}
	})
}

// TestOutageBehindShortDeadlines: an upstream down hard (every request
// fails at once with a 503) behind callers with a 300 ms deadline, the
// default config and retry policy, and a circuit breaker of 3 failures.
// Before, each call slept the transient retries' backoff into its
// deadline and was booked as ignored: 6 calls, 0 failures, the breaker
// never opened, and each call took the whole 300 ms. Now the failures
// are the agent's, the breaker opens, and no call sleeps past its
// deadline.
func TestOutageBehindShortDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithCircuitBreaker(si.CircuitBreaker{Failures: 3, CoolOff: time.Minute}))
		defer l.Close()
		down := errors.New("503 service unavailable")
		fastFails := 0
		for range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			_, err := l.ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return down })
			cancel()
			if d := time.Since(start); d >= 300*time.Millisecond {
				t.Errorf("a call took %v, its whole deadline", d)
			}
			if errors.Is(err, si.ErrCircuitOpen) {
				fastFails++
			} else if !errors.Is(err, down) {
				t.Fatalf("err %v", err)
			}
		}
		if st := l.Stats("a"); st.Failures < 3 || st.Ignored != 0 || fastFails != 3 {
			t.Errorf("6 calls against a hard outage: %d failures, %d ignored, %d failed fast by the breaker; want 3, 0 and 3", st.Failures, st.Ignored, fastFails)
		}
	})
}

func TestStrategyTimeoutBoundsTheCall(t *testing.T) {
	tests := []struct {
		name  string
		strat func(release <-chan struct{}) si.Strategy
	}{
		{"honours ctx", func(<-chan struct{}) si.Strategy {
			return si.StrategyFunc(func(ctx context.Context, _ si.Analysis) (*si.Tweak, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
		}},
		{"ignores ctx", func(release <-chan struct{}) si.Strategy {
			return si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) {
				<-release
				return &si.Tweak{Config: si.Config{Route: "late"}}, nil
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				l := looptest.NewLoop(t, si.WithStrategy(tt.strat(release)), si.WithStrategyTimeout(3*time.Second),
					si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
				fail := func(context.Context, si.Config) error { return errBoom }
				l.ExecuteWithImprovement(context.Background(), "a", fail)
				start := time.Now()
				rep, err := l.ExecuteWithImprovement(context.Background(), "a", fail)
				if d := time.Since(start); d != 3*time.Second {
					t.Errorf("triggering call took %v, want the 3s strategy timeout", d)
				}
				if !errors.Is(err, errBoom) || !rep.ImprovementTriggered || !errors.Is(rep.LoopErr, si.ErrStrategyTimeout) {
					t.Fatalf("report = %+v", rep)
				}
				close(release)
				synctest.Wait()
				if got := l.Config("a"); got.Version != 1 {
					t.Errorf("a late answer was applied: %+v", got)
				}
				if m := l.Metrics(); m.StrategyTimeouts != 1 || m.StrategyErrors != 1 {
					t.Errorf("metrics = %+v", m)
				}
				l.Close()
			})
		})
	}
}

func TestCallerLeavesWhileStrategyRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		strat := si.StrategyFunc(func(ctx context.Context, _ si.Analysis) (*si.Tweak, error) {
			time.Sleep(2 * time.Second) // a slow, LLM-backed strategy
			return &si.Tweak{Config: si.Config{Route: "b"}, Reason: "slow but sure"}, nil
		})
		l := looptest.NewLoop(t, si.WithStrategy(strat), si.WithNotifier(rec), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
		fail := func(context.Context, si.Config) error { return errBoom }
		l.ExecuteWithImprovement(context.Background(), "a", fail)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rep, _ := l.ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return errBoom })
		if !rep.ImprovementTriggered || rep.Improvement != nil {
			t.Fatalf("report = %+v", rep)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := l.Config("a"); got.Version != 2 || got.Route != "b" {
			t.Fatalf("config = %+v, want the tweak applied after the caller left", got)
		}
		l.Close()
		if got := rec.types(); len(got) != 1 || got[0] != si.EventImprovementApplied {
			t.Errorf("events = %v", got)
		}
	})
}
