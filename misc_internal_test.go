package selfimprove

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/self-improving-loop/selfimprove/failure"
)

func TestNotifierQueueOverflowIsCountedNeverBlocking(t *testing.T) {
	m := new(metrics)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var got atomic.Int64 // events delivered, those in digests included
	n := NotifierFunc(func(ctx context.Context, e Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		got.Add(int64(max(len(e.Digest), 1)))
		return nil
	})
	d := newDispatcher([]Notifier{n}, slog.New(slog.NewTextHandler(io.Discard, nil)), NotifyOptions{Queue: 2, Timeout: time.Minute}, m)
	d.send(Event{ID: "1"})
	<-started // the worker holds event 1; the queue (2) is empty
	for i := range 5 {
		d.send(Event{ID: string(rune('2' + i))}) // 2 fit, 3 are dropped, none blocks
	}
	if got := m.notifyDropped.Load(); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
	close(release)
	if err := d.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := got.Load(); got != 3 {
		t.Errorf("delivered %d, want 3", got)
	}
	d.send(Event{ID: "late"}) // after close: dropped, counted, no panic
	if got := m.notifyDropped.Load(); got != 4 {
		t.Errorf("dropped %d after close, want 4", got)
	}
}

func TestDispatcherCloseGivesUpAtItsDeadline(t *testing.T) {
	m := new(metrics)
	block := make(chan struct{})
	defer close(block)
	d := newDispatcher([]Notifier{NotifierFunc(func(ctx context.Context, e Event) error { <-block; return nil })},
		slog.New(slog.NewTextHandler(io.Discard, nil)), NotifyOptions{Queue: 8, Timeout: time.Minute}, m)
	d.send(Event{ID: "stuck"})
	d.send(Event{ID: "queued"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("close = %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/state")
	if d, err := DefaultDir(); err != nil || d != filepath.Join("/var/state", "selfimprove") {
		t.Errorf("DefaultDir = %q, %v", d, err)
	}
	if runtime.GOOS != "linux" {
		return // elsewhere the fallback is os.UserConfigDir()/selfimprove
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, err := DefaultDir(); err != nil || d != filepath.Join("/home/u", ".local", "state", "selfimprove") {
		t.Errorf("DefaultDir = %q, %v", d, err)
	}
}

func TestRAMStore(t *testing.T) {
	m := &RAMStore{MaxLog: 3}
	for i := range 5 {
		m.AppendEvents([]Event{{ID: string(rune('a' + i))}})
	}
	if got := m.Events(); len(got) != 3 || got[0].ID != "c" {
		t.Errorf("events = %+v, want the last 3", got)
	}
	m.SaveAgent("x", []byte("not json"))
	err := m.LoadAgent("x", func(b []byte) error { return errors.New("bad") })
	if !errors.Is(err, ErrCorruptState) {
		t.Errorf("LoadAgent = %v", err)
	}
	if err := m.LoadAgent("x", func([]byte) error { return nil }); err == nil {
		t.Error("the corrupt state is still served")
	}
	if string(m.corrupt["x"]) != "not json" {
		t.Errorf("the corrupt state was not set aside: %q", m.corrupt["x"])
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Timeout: -1}, {Backoff: -1}, {MaxAttempts: -1}, {MaxAttempts: 101}} {
		if err := c.validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("validate(%+v) = %v", c, err)
		}
	}
	if err := (Config{MaxAttempts: 100, Timeout: time.Second}).validate(); err != nil {
		t.Error(err)
	}
	if _, err := New(WithStore(NewRAMStore()), WithDefaultConfig(Config{Timeout: -1})); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New with an invalid default config = %v", err)
	}
}

func TestPolicyWithNonFiniteLimits(t *testing.T) {
	before := Stats{Calls: 10, TotalLatency: 10 * time.Millisecond}
	after := Stats{Calls: 10, Failures: 9, TotalLatency: time.Second}
	p := RollbackPolicy{MaxSuccessDrop: math.Inf(1), MaxLatencyRise: math.Inf(1)}
	if v := p.Judge(before, after); v.Decision != DecisionConfirm {
		t.Errorf("infinite limits: %v (%s)", v.Decision, v.Reason)
	}
	p = RollbackPolicy{MaxSuccessDrop: math.NaN(), MaxLatencyRise: math.NaN()}
	if v := p.Judge(before, after); v.Decision != DecisionConfirm {
		t.Errorf("NaN limits (rules off): %v", v.Decision)
	}
}

func TestStrings(t *testing.T) {
	for v, want := range map[interface{ String() string }]string{
		DecisionWait: "wait", DecisionConfirm: "confirm", DecisionRollback: "rollback", Decision(9): "Decision(9)",
		TracesOff: "off", TracesBatched: "batched", TracesSync: "sync", TraceMode(7): "TraceMode(7)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestMemorySavedAtMostOnceAMinute(t *testing.T) {
	m := newMemory(MemoryOptions{})
	sig := []byte("upstream down")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	m.observe("a", failure.ClusterOf(sig), sig, failure.ClassOther, now)
	steps := []struct {
		at      time.Duration
		closing bool
		observe bool
		want    bool
	}{
		{0, false, false, true},                          // the first save
		{time.Second, false, true, false},                // changed, but saved a second ago
		{59 * time.Second, false, false, false},          // still within the minute
		{time.Minute, false, false, true},                // a minute on
		{time.Minute + time.Second, false, false, false}, // unchanged
		{time.Minute + 2*time.Second, true, true, true},  // closing: saved at once
	}
	for i, s := range steps {
		if s.observe {
			m.observe("a", failure.ClusterOf(sig), sig, failure.ClassOther, now+int64(s.at))
		}
		if _, saved, err := m.encode(now+int64(s.at), s.closing); err != nil || saved != s.want {
			t.Errorf("step %d: saved %v (%v), want %v", i, saved, err, s.want)
		}
	}
}

// TestJitterSeed: under RetryPolicy.JitterSeed, two Loops draw the same backoffs,
// each within [d/2, d]; another seed draws others.
func TestJitterSeed(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		l, err := New(WithStore(NewRAMStore()), WithNotifier(nil), WithRetryPolicy(RetryPolicy{JitterSeed: seed}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var out []time.Duration
		for attempt := 1; attempt <= 20; attempt++ {
			d := l.backoff(100*time.Millisecond, attempt%4+1, maxBackoff)
			full := 100 * time.Millisecond << (attempt % 4)
			if d < full/2 || d > full {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, full/2, full)
			}
			out = append(out, d)
		}
		return out
	}
	a, b, c := draws(7), draws(7), draws(8)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different draws:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatal("another seed drew the same sequence")
	}
}

// TestReportSize: a Report is returned by value on every call. At a
// multiple of 16 bytes it is copied in whole 16-byte moves; at 104 bytes
// (BudgetExhausted after LoopErr) the copy's last two moves overlapped and
// the caller's reads stalled on the callee's writes, about 6 ns a call.
// A new field belongs where it keeps the size a multiple of 16. (112
// since Version and ID came together.)
func TestReportSize(t *testing.T) {
	if n := unsafe.Sizeof(Report{}); n%16 != 0 || n > 112 {
		t.Fatalf("Report is %d bytes; want at most 112 and a multiple of 16", n)
	}
}
