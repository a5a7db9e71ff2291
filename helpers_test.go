package selfimprove_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var errBoom = errors.New("boom")

// recorder is a Notifier that keeps the events it gets, and when.
type recorder struct {
	mu     sync.Mutex
	events []si.Event
	at     []time.Time
}

func (r *recorder) Notify(_ context.Context, e si.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.at = append(r.at, time.Now())
	return nil
}

// waitFor waits until n events were delivered: the notifier runs on its
// own goroutine. It fails the test after 10 seconds.
func (r *recorder) waitFor(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		k := len(r.events)
		r.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events delivered after 10s, want %d", k, n)
		}
	}
}

// all returns copies of the events and of their times.
func (r *recorder) all() ([]si.Event, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]si.Event(nil), r.events...), append([]time.Time(nil), r.at...)
}

// types returns the types of the events delivered, a digest's events in
// its place: Close sends the events still queued as one digest, so which
// arrive alone depends on how far the notifier got.
func (r *recorder) types() []si.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []si.EventType
	for _, e := range r.events {
		if e.Type == si.EventDigest {
			for _, d := range e.Digest {
				out = append(out, d.Type)
			}
			continue
		}
		out = append(out, e.Type)
	}
	return out
}

// env is a Loop on a temporary directory with a fake clock.
type env struct {
	t   *testing.T
	clk *fakeclock.Clock
	dir string
	l   *si.Loop
	rec *recorder
}

// quiet is a logger that discards.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newEnv(t *testing.T, opts ...si.Option) *env {
	t.Helper()
	e := &env{t: t, clk: fakeclock.New(t0), dir: t.TempDir(), rec: &recorder{}}
	e.open(opts...)
	return e
}

// newStoreEnv is newEnv for a test that gives the loop its own store
// (WithStore, withFileStore) among opts.
func newStoreEnv(t *testing.T, opts ...si.Option) *env {
	t.Helper()
	e := &env{t: t, clk: fakeclock.New(t0), rec: &recorder{}}
	e.openWithStore(opts...)
	return e
}

// withFileStore gives the loop a FileStore on dir opened with o, with the
// test's clock and logger.
func withFileStore(t *testing.T, dir string, o si.FileOptions) si.Option {
	t.Helper()
	o.Clock, o.Logger = fakeclock.New(t0), quiet
	fs, err := si.OpenFileStore(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return si.WithStore(fs)
}

// open (re)opens the loop on e's directory.
func (e *env) open(opts ...si.Option) {
	e.t.Helper()
	e.openWithStore(append([]si.Option{si.WithDir(e.dir)}, opts...)...)
}

// openWithStore (re)opens the loop on the store among opts (WithStore:
// New refuses it beside WithDir).
func (e *env) openWithStore(opts ...si.Option) {
	e.t.Helper()
	// Tracking only unless the test names a strategy; and no minimum of
	// calls before a change (the threshold's failures trigger at once on
	// a new agent) unless the test sets a policy: coldstart_test.go
	// covers the minimum. One attempt a call unless the config says more:
	// retrypolicy_test.go covers the transient floor.
	base := []si.Option{si.WithClock(e.clk), si.WithNotifier(e.rec), si.WithLogger(quiet), si.WithStrategy(nil),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}), noFloor}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.l = l
	e.t.Cleanup(func() { l.Close() })
}

// call runs one call of agent id that takes d and returns err.
func (e *env) call(id string, err error, d time.Duration) si.Report {
	e.t.Helper()
	rep, got := e.l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
		e.clk.Advance(d)
		return err
	})
	if !errors.Is(got, err) || (err == nil && got != nil) {
		e.t.Fatalf("ExecuteWithImprovement returned %v, want fn's error %v", got, err)
	}
	return rep
}

// calls makes n calls of agent id.
func (e *env) calls(id string, n int, err error, d time.Duration) {
	e.t.Helper()
	for range n {
		e.call(id, err, d)
	}
}

// tweakStrategy proposes fixed tweaks in turn and counts its runs.
type tweakStrategy struct {
	mu     sync.Mutex
	tweaks []si.Config
	runs   int
	seen   []si.Analysis
}

func (s *tweakStrategy) Analyze(_ context.Context, a si.Analysis) (*si.Tweak, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	s.seen = append(s.seen, a)
	if len(s.tweaks) == 0 {
		return nil, nil
	}
	c := s.tweaks[0]
	s.tweaks = s.tweaks[1:]
	return &si.Tweak{Config: c, Reason: "test tweak"}, nil
}

func (s *tweakStrategy) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// heldCall starts a call of agent id whose fn blocks until released, then
// returns err. It returns once fn is running; the report comes on done.
func (e *env) heldCall(id string, err error) (release func(), done <-chan si.Report) {
	started, finish := make(chan struct{}), make(chan struct{})
	reports := make(chan si.Report, 1)
	go func() {
		rep, _ := e.l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
			close(started)
			<-finish
			return err
		})
		reports <- rep
	}()
	<-started
	return func() { close(finish) }, reports
}

// noFloor turns the transient floor (RetryPolicy.TransientAttempts) off:
// a call makes the attempts its config allows, as the tests of the
// strategy's own answers need.
var noFloor = si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1})

// readOnlyLoop is a Loop on a ReadOnlyStore of dir, closed with the test.
func readOnlyLoop(t *testing.T, dir string) *si.Loop {
	t.Helper()
	ro, err := si.OpenReadOnlyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := si.New(si.WithStore(ro), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
