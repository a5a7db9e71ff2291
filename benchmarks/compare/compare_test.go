package compare

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/sony/gobreaker/v2"
)

// agent is the one agent (and breaker name) every benchmark calls.
const agent = "agent"

// work is the wrapped call: it returns nil. Called through a package-level
// variable, it cannot be inlined away.
var work = func(context.Context, si.Config) error { return nil }

// errTypical is a typical 200-byte error as an LLM API returns it, the
// same text as the root benchmarks' BenchmarkFailureTypical.
var errTypical = errors.New(`error code: 429 - {'error': {'message': 'Rate limit reached for gpt-4o in org-7f3a9c on tokens per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s.', 'code': 'rate_limit'}}`)

// fail is the failing call: it returns errTypical.
var fail = func(context.Context, si.Config) error { return errTypical }

// sink keeps each result alive, so that no call is optimised away.
var sink error

// sinkTime keeps BenchmarkTimeNow's last reading alive.
var sinkTime time.Time

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// newLoop returns a loop set up as the root benchmarks' BenchmarkSuccess
// sets it up: tracking only (no strategy), no notifier, a discarded log;
// its state is kept in memory. opts come after those.
func newLoop(tb testing.TB, opts ...si.Option) *si.Loop {
	tb.Helper()
	opts = append([]si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(discard), si.WithStrategy(nil),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1})}, opts...) // the same work as the others: one attempt
	l, err := si.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// newCoolingLoop returns a loop whose agent has crossed its failure
// threshold once, as BenchmarkFailureTypical sets it up: its later
// failures are recorded during the cooldown and trigger nothing.
func newCoolingLoop(tb testing.TB) *si.Loop {
	tb.Helper()
	l := newLoop(tb)
	for range si.DefaultMinBeforeCalls { // a new agent waits for 10 calls before it crosses the threshold
		l.ExecuteWithImprovement(context.Background(), agent, fail)
	}
	return l
}

// newBreaker returns a gobreaker with its default settings.
func newBreaker() *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{Name: agent})
}

// newCountingBreaker returns a gobreaker that never trips, so that every
// failure goes through its counting path.
func newCountingBreaker() *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        agent,
		ReadyToTrip: func(gobreaker.Counts) bool { return false },
	})
}

// request adapts fn to gobreaker's request type, with the same arguments
// as the direct call.
func request(ctx context.Context, fn func(context.Context, si.Config) error) func() (any, error) {
	var cfg si.Config
	return func() (any, error) { return nil, fn(ctx, cfg) }
}

// The calls each benchmark measures, one per iteration; TestSameWork runs
// the same ones.

func callLoop(ctx context.Context, l *si.Loop, fn func(context.Context, si.Config) error) error {
	_, err := l.ExecuteWithImprovement(ctx, agent, fn)
	return err
}

func callBreaker(cb *gobreaker.CircuitBreaker[any], req func() (any, error)) error {
	_, err := cb.Execute(req)
	return err
}

// BenchmarkDirect is the baseline: the call alone.
func BenchmarkDirect(b *testing.B) {
	ctx := context.Background()
	var cfg si.Config
	b.ReportAllocs()
	for b.Loop() {
		sink = work(ctx, cfg)
	}
}

// BenchmarkLoop is the call through ExecuteWithImprovement: the loop's
// success path, no change being verified.
func BenchmarkLoop(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink = callLoop(ctx, l, work)
	}
}

// BenchmarkLoopNoCallScores is BenchmarkLoop with WithCallScores(false):
// the calls carry no place for a score or cost.
func BenchmarkLoopNoCallScores(b *testing.B) {
	l := newLoop(b, si.WithCallScores(false))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink = callLoop(ctx, l, work)
	}
}

// BenchmarkLoopCoarse is BenchmarkLoop with WithCoarseClock(time.Millisecond):
// the clock's readings come from an atomic value.
func BenchmarkLoopCoarse(b *testing.B) {
	l := newLoop(b, si.WithCoarseClock(time.Millisecond))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink = callLoop(ctx, l, work)
	}
}

// BenchmarkGobreaker is the call through a closed gobreaker's Execute.
func BenchmarkGobreaker(b *testing.B) {
	cb := newBreaker()
	req := request(context.Background(), work)
	b.ReportAllocs()
	for b.Loop() {
		sink = callBreaker(cb, req)
	}
}

// BenchmarkParallelDirect is the baseline of the parallel cases: the call
// alone, from every P.
func BenchmarkParallelDirect(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var cfg si.Config
		var err error
		for pb.Next() {
			err = work(ctx, cfg)
		}
		if err != nil {
			b.Error(err)
		}
	})
}

// BenchmarkParallelLoop: every P calls the same agent through the loop.
func BenchmarkParallelLoop(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var err error
		for pb.Next() {
			err = callLoop(ctx, l, work)
		}
		if err != nil {
			b.Error(err)
		}
	})
}

// BenchmarkParallelGobreaker: every P calls through the same breaker.
func BenchmarkParallelGobreaker(b *testing.B) {
	cb := newBreaker()
	req := request(context.Background(), work)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var err error
		for pb.Next() {
			err = callBreaker(cb, req)
		}
		if err != nil {
			b.Error(err)
		}
	})
}

// BenchmarkTimeNow is one call of time.Now, which gobreaker makes twice a
// call and the loop once (with a time.Since): its cost varies with the
// machine's clock source and load, and explains part of the variation
// between runs.
func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	b.ReportAllocs()
	for b.Loop() {
		t = time.Now()
	}
	sinkTime = t
}

// BenchmarkDirectFailure is the baseline of the failure cases: the failing
// call alone.
func BenchmarkDirectFailure(b *testing.B) {
	ctx := context.Background()
	var cfg si.Config
	b.ReportAllocs()
	for b.Loop() {
		sink = fail(ctx, cfg)
	}
}

// BenchmarkLoopFailure is a failed call with the typical 200-byte error
// during the agent's cooldown: recorded, scrubbed, classified, signed,
// clustered and remembered.
func BenchmarkLoopFailure(b *testing.B) {
	l := newCoolingLoop(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink = callLoop(ctx, l, fail)
	}
}

// BenchmarkGobreakerFailure is the same failed call through a gobreaker
// that never trips: every failure is counted.
func BenchmarkGobreakerFailure(b *testing.B) {
	cb := newCountingBreaker()
	req := request(context.Background(), fail)
	b.ReportAllocs()
	for b.Loop() {
		sink = callBreaker(cb, req)
	}
}

// TestSameWork checks that each benchmark's setup and call do what the
// benchmark claims: every call runs the function once and is counted by
// the wrapper, on the success and on the failure path, from one goroutine
// and from several.
func TestSameWork(t *testing.T) {
	t.Run("direct", testSameWorkDirect)
	t.Run("loop", testSameWorkLoop)
	t.Run("gobreaker", testSameWorkGobreaker)
	t.Run("parallel", testSameWorkParallel)
	t.Run("loop failure", testSameWorkLoopFailure)
	t.Run("gobreaker failure", testSameWorkGobreakerFailure)
}

// sameWorkCalls is how many calls each of TestSameWork's checks makes.
const sameWorkCalls = 1000

// testSameWorkDirect checks the direct call: work succeeds, fail returns the typical
// error, of about 200 bytes.
func testSameWorkDirect(t *testing.T) {
	ctx := context.Background()
	var cfg si.Config
	if err := work(ctx, cfg); err != nil {
		t.Errorf("work returned %v, want nil", err)
	}
	if err := fail(ctx, cfg); !errors.Is(err, errTypical) {
		t.Errorf("fail returned %v, want errTypical", err)
	}
	if got := len(errTypical.Error()); got < 190 || got > 210 {
		t.Errorf("the typical error has %d bytes, want about 200", got)
	}
}

// testSameWorkLoop checks that each call of the loop, by ExecuteWithImprovement
// and by callLoop, succeeds in one attempt and is counted.
func testSameWorkLoop(t *testing.T) {
	const n = sameWorkCalls
	ctx := context.Background()
	l := newLoop(t)
	before := l.Stats(agent).Calls
	for range n {
		rep, err := l.ExecuteWithImprovement(ctx, agent, work)
		if err != nil || !rep.Success || rep.Attempts != 1 {
			t.Fatalf("call: success %v, %d attempts, err %v; want a success in 1 attempt", rep.Success, rep.Attempts, err)
		}
	}
	for range n {
		if err := callLoop(ctx, l, work); err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats(agent)
	if st.Calls-before != 2*n || st.Failures != 0 {
		t.Errorf("after %d successes: %d calls, %d failures recorded", 2*n, st.Calls-before, st.Failures)
	}
}

// testSameWorkGobreaker checks that each call through gobreaker succeeds and is
// counted.
func testSameWorkGobreaker(t *testing.T) {
	const n = sameWorkCalls
	ctx := context.Background()
	cb := newBreaker()
	req := request(ctx, work)
	for range n {
		if err := callBreaker(cb, req); err != nil {
			t.Fatal(err)
		}
	}
	c := cb.Counts()
	if c.Requests != n || c.TotalSuccesses != n || c.TotalFailures != 0 {
		t.Errorf("after %d successes: %+v", n, c)
	}
}

// testSameWorkParallel checks that calls of the loop and through gobreaker from
// several goroutines all succeed and are all counted.
func testSameWorkParallel(t *testing.T) {
	const n = sameWorkCalls
	ctx := context.Background()
	const goroutines = 4
	l := newLoop(t)
	cb := newBreaker()
	req := request(ctx, work)
	errs := make(chan error, 2*goroutines)
	for range goroutines {
		go func() {
			var err error
			for range n {
				if err = callLoop(ctx, l, work); err != nil {
					break
				}
			}
			errs <- err
		}()
		go func() {
			var err error
			for range n {
				if err = callBreaker(cb, req); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	timeout := time.After(time.Minute)
	for range 2 * goroutines {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-timeout:
			t.Fatal("the parallel calls did not return within a minute")
		}
	}
	if got := l.Stats(agent).Calls; got != goroutines*n {
		t.Errorf("loop: %d calls recorded, want %d", got, goroutines*n)
	}
	if got := cb.Counts().Requests; got != goroutines*n {
		t.Errorf("gobreaker: %d requests counted, want %d", got, goroutines*n)
	}
}

// testSameWorkLoopFailure checks that each failing call of the loop, on an agent
// in its cooldown, fails in one attempt, triggers nothing, and is counted.
func testSameWorkLoopFailure(t *testing.T) {
	const n = sameWorkCalls
	ctx := context.Background()
	l := newCoolingLoop(t)
	before := l.Stats(agent)
	if want := si.DefaultMinBeforeCalls; before.Calls != want || before.Failures != want {
		t.Fatalf("setup: %d calls, %d failures; want %d failures", before.Calls, before.Failures, want)
	}
	for range n {
		rep, err := l.ExecuteWithImprovement(ctx, agent, fail)
		if !errors.Is(err, errTypical) || rep.Attempts != 1 {
			t.Fatalf("call: %d attempts, err %v; want errTypical in 1 attempt", rep.Attempts, err)
		}
		if rep.ImprovementTriggered {
			t.Fatal("a failure during the cooldown triggered an improvement")
		}
	}
	for range n {
		if err := callLoop(ctx, l, fail); !errors.Is(err, errTypical) {
			t.Fatalf("call: err %v, want errTypical", err)
		}
	}
	st := l.Stats(agent)
	if st.Calls-before.Calls != 2*n || st.Failures-before.Failures != 2*n {
		t.Errorf("after %d failures: %d calls, %d failures recorded", 2*n, st.Calls-before.Calls, st.Failures-before.Failures)
	}
}

// testSameWorkGobreakerFailure checks that each failing call through the counting
// breaker is counted and that the breaker never trips.
func testSameWorkGobreakerFailure(t *testing.T) {
	const n = sameWorkCalls
	ctx := context.Background()
	cb := newCountingBreaker()
	req := request(ctx, fail)
	for range n {
		if err := callBreaker(cb, req); !errors.Is(err, errTypical) {
			t.Fatalf("call: err %v, want errTypical (the breaker must not trip)", err)
		}
	}
	c := cb.Counts()
	if c.Requests != n || c.TotalFailures != n || c.ConsecutiveFailures != n {
		t.Errorf("after %d failures: %+v", n, c)
	}
	if s := cb.State(); s != gobreaker.StateClosed {
		t.Errorf("state %v after %d failures, want closed", s, n)
	}
}
