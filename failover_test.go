package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Issue 40, item 2: an attempt that got no answer in time fails over to
// the next route of the ladder at once; the same silent route is not
// asked again in the call. The docs' setup: primary → backup, Timeout
// 30 s, FirstTokenTimeout 10 s, MaxAttempts 3. Before, the second
// attempt went to the same silent primary, and the backup answered only
// at the third, 21 s in (with a Timeout alone, 20 s in).
func TestSilentAttemptFailsOverAtOnce(t *testing.T) {
	backup := func(ctx context.Context) error { // first token at 100 ms, done at 1 s
		time.Sleep(100 * time.Millisecond)
		stream.FirstToken(ctx)
		time.Sleep(900 * time.Millisecond)
		return nil
	}
	for _, tc := range []struct {
		name    string
		cfg     si.Config
		primary func(ctx context.Context) error
		want    time.Duration
	}{
		{"no answer, first-token deadline", si.Config{Timeout: 30 * time.Second, FirstTokenTimeout: 10 * time.Second, MaxAttempts: 3},
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, 11 * time.Second},
		{"first token after 20 s", si.Config{Timeout: 30 * time.Second, FirstTokenTimeout: 10 * time.Second, MaxAttempts: 3},
			func(ctx context.Context) error {
				select {
				case <-time.After(20 * time.Second):
					stream.FirstToken(ctx)
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, 11 * time.Second},
		{"no answer, attempt deadline", si.Config{Timeout: 10 * time.Second, MaxAttempts: 3},
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, 11 * time.Second},
		{"no answer, the client's own timeout", si.Config{MaxAttempts: 3},
			func(ctx context.Context) error {
				time.Sleep(10 * time.Second) // an http.Client Timeout, say
				return fmt.Errorf("Post \"https://api.example.com/v1/chat/completions\": %w", context.DeadlineExceeded)
			}, 11 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := looptest.NewLoop(t, si.WithDefaultConfig(tc.cfg), si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
				defer l.Close()
				asked := map[string]int{}
				rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
					if c.Route == "backup" {
						asked["backup"]++
						return backup(ctx)
					}
					asked["primary"]++
					return tc.primary(ctx)
				})
				if err != nil || asked["primary"] != 1 || asked["backup"] != 1 || rep.Duration != tc.want {
					t.Errorf("err %v, asked %v, answered after %v; want the backup's answer after %v, the primary asked once", err, asked, rep.Duration, tc.want)
				}
			})
		})
	}
}

// Issue 40, item 6: a retry on the same route after a transient failure
// waits, as the LLM SDKs wait, when the config sets MaxAttempts and no
// Backoff: 0.5 s doubled with jitter, or the server's wait when it gives
// one. The attempt on the next route of the ladder goes at once: the
// wait is the failing route's. Before, the three attempts (429, 429,
// the fallback) were made within the same millisecond.
func TestRetriesWaitWithoutBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}), si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
		defer l.Close()
		start := time.Now()
		var at []time.Duration
		var routes []string
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
			at, routes = append(at, time.Since(start)), append(routes, c.Route)
			if c.Route == "backup" {
				return nil
			}
			return errRateLimited
		})
		if err != nil || len(at) != 3 || routes[2] != "backup" {
			t.Fatalf("err %v, attempts on %q: want two on the primary, the third on the backup", err, routes)
		}
		if gap := at[1] - at[0]; gap < 250*time.Millisecond || gap > 500*time.Millisecond {
			t.Errorf("the retry on the primary came %v after the first attempt, want 0.25 to 0.5 s", gap)
		}
		if gap := at[2] - at[1]; gap != 0 {
			t.Errorf("the backup was asked %v after the primary's second failure, want at once", gap)
		}
		if rep.Duration != at[2] {
			t.Errorf("duration %v, want %v", rep.Duration, at[2])
		}
	})
}

var errRateLimited = errors.New("429 Too Many Requests: rate limit reached for requests")

// Issue 40, item 2: a stream that stalls after it began is cut by the
// stream idle limit (RetryPolicy.StreamIdle, 30 s by default) and fails
// over; one whose chunks keep coming, however long, is not. Before,
// nothing watched the gap between chunks: the stalled attempt ran to its
// whole Timeout (30 s), was retried on the same route, and the answer
// came at 61 s.
func TestStreamIdleLimit(t *testing.T) {
	ladder := si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}})
	cfg := si.WithDefaultConfig(si.Config{Timeout: 5 * time.Minute, FirstTokenTimeout: 10 * time.Second, MaxAttempts: 3})
	chunks := func(ctx context.Context, n int, gap time.Duration) error {
		stream.FirstToken(ctx)
		for range n {
			select {
			case <-time.After(gap):
				stream.Chunk(ctx)
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}
	t.Run("stall after 20 tokens", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := looptest.NewLoop(t, cfg, ladder)
			defer l.Close()
			var errs []error
			rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
				if c.Route == "backup" {
					return chunks(ctx, 3, 100*time.Millisecond)
				}
				if err := chunks(ctx, 20, 50*time.Millisecond); err != nil {
					return err
				}
				<-ctx.Done() // open and silent
				errs = append(errs, context.Cause(ctx))
				return context.Cause(ctx)
			})
			if err != nil || rep.Attempts != 2 || len(errs) != 1 || !errors.Is(errs[0], failure.ErrStreamStalled) {
				t.Fatalf("err %v, attempts %d, the primary's %v: want it cut as stalled, and the backup's answer", err, rep.Attempts, errs)
			}
			if want := time.Second + 30*time.Second + 300*time.Millisecond; rep.Duration != want {
				t.Errorf("answered after %v, want %v (20 tokens, the idle limit, the backup's answer)", rep.Duration, want)
			}
		})
	})
	t.Run("a long stream that keeps coming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := looptest.NewLoop(t, cfg, ladder)
			defer l.Close()
			rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
				return chunks(ctx, 10, 20*time.Second) // 200 s, a chunk every 20 s
			})
			if err != nil || rep.Attempts != 1 || rep.Duration != 200*time.Second {
				t.Errorf("err %v, attempts %d, duration %v: want the whole stream at the first attempt", err, rep.Attempts, rep.Duration)
			}
		})
	})
}

// Issue 40, item 4: a request too long for the primary's context window
// goes to the next route of the ladder within the call, whatever
// MaxAttempts says (the default: 1); with no route left, the call ends at
// once with the provider's error, never retried on the same model.
// Before, the call ended after its first attempt although a fallback was
// configured.
func TestContextLengthFallsBack(t *testing.T) {
	tooLong := errors.New(`400 Bad Request: {"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 12000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithRoutes(si.Routes{Primary: "small", Fallbacks: []string{"large"}}))
		defer l.Close()
		var asked []string
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
			asked = append(asked, c.Route)
			if c.Route == "large" {
				return nil
			}
			return tooLong
		})
		if err != nil || len(asked) != 2 || asked[1] != "large" || rep.Duration != 0 {
			t.Errorf("err %v, routes asked %q after %v: want the large model's answer at once", err, asked, rep.Duration)
		}
		asked = nil
		_, err = l.ExecuteWithImprovement(context.Background(), "b", func(_ context.Context, c si.Config) error {
			asked = append(asked, c.Route)
			return tooLong
		})
		if failure.Classify(err) != failure.ClassContextLength || len(asked) != 2 {
			t.Errorf("err %v, routes asked %q: want each route once, then the provider's error", err, asked)
		}
	})
}
