package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// heldNotifier returns a notifier that signals started when its first
// delivery begins, holds every delivery until block is closed, then
// passes each event to record (one at a time).
func heldNotifier(record func(si.Event)) (n si.Notifier, started <-chan struct{}, block chan struct{}) {
	block, begun := make(chan struct{}), make(chan struct{}, 1)
	var mu sync.Mutex
	n = si.NotifierFunc(func(ctx context.Context, e si.Event) error {
		select {
		case begun <- struct{}{}:
		default:
		}
		<-block
		mu.Lock()
		defer mu.Unlock()
		record(e)
		return nil
	})
	return n, begun, block
}

func TestQueueDropsTheLeastImportantFirst(t *testing.T) {
	var got []si.EventType
	logs := &looptest.Buffer{}
	n, started, block := heldNotifier(func(e si.Event) {
		if e.Type == si.EventDigest {
			for _, d := range e.Digest {
				got = append(got, d.Type)
			}
		} else {
			got = append(got, e.Type)
		}
	})
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n),
		si.WithNotifyOptions(si.NotifyOptions{Queue: 3, BurstLimit: -1}),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	// The first event occupies the notifier; then the queue of 3 fills.
	send := func(typ si.EventType) { si.TestingEmit(l, si.Event{ID: string(typ), Type: typ, AgentID: "a"}) }
	send(si.EventConfigSet) // in flight
	<-started
	send(si.EventChangeConfirmed)
	send(si.EventRolledBack)
	send(si.EventChangeConfirmed)
	send(si.EventRolledBack)      // full: drops the oldest confirmation
	send(si.EventChangeConfirmed) // full: drops the older confirmation
	send(si.EventRollbackFailed)  // drops the newer confirmation
	if m := l.Metrics(); m.NotifyDropped != 3 {
		t.Errorf("dropped %d, want 3", m.NotifyDropped)
	}
	close(block)
	l.Close()
	want := []si.EventType{si.EventConfigSet, si.EventRolledBack, si.EventRolledBack, si.EventRollbackFailed}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	// Logged: the first drop at once, the two that followed within the
	// second by the delivery goroutine or at Close.
	out := logs.String()
	if !strings.Contains(out, "dropped=1 ") || !strings.Contains(out, "dropped=2 ") {
		t.Errorf("drops not logged with their counts:\n%s", out)
	}
}

// TestFullQueueKeepsTheNewerOfEqualEvents: when the queue is full and a
// new event is as important as the least important pending ones, the
// oldest of those is dropped, not the new one, which tells the current
// state. Before, the new event was dropped and the older kept.
func TestFullQueueKeepsTheNewerOfEqualEvents(t *testing.T) {
	var got []string
	logs := &looptest.Buffer{}
	n, started, block := heldNotifier(func(e si.Event) { got = append(got, e.ID) })
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n),
		si.WithNotifyOptions(si.NotifyOptions{Queue: 2, BurstLimit: -1}),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	send := func(id string, typ si.EventType) { si.TestingEmit(l, si.Event{ID: id, Type: typ, AgentID: "a"}) }
	send("in-flight", si.EventConfigSet)
	<-started
	send("opened-1", si.EventCircuitOpened)
	send("opened-2", si.EventCircuitOpened)
	send("opened-3", si.EventCircuitOpened) // full: opened-1 goes
	if m := l.Metrics(); m.NotifyDropped != 1 {
		t.Errorf("dropped %d, want 1", m.NotifyDropped)
	}
	close(block)
	l.Close()
	if want := "[in-flight opened-2 opened-3]"; fmt.Sprint(got) != want {
		t.Errorf("delivered %v, want %s", got, want)
	}
	if out := logs.String(); !strings.Contains(out, "id=opened-1 ") || !strings.Contains(out, "notifier queue full") {
		t.Errorf("the drop is not logged with the event and its cause:\n%s", out)
	}
}

func TestBurstCollapsesIntoADigest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		start := time.Now()
		l, emit := looptest.DeliveryLoop(t, rec, si.NotifyOptions{BurstLimit: 2, BurstWindow: time.Minute}, nil)
		for i := range 6 {
			emit(fmt.Sprint(i))
			synctest.Wait()
		}
		time.Sleep(2 * time.Minute)
		got, at := rec.all()
		if len(got) != 3 || got[0].Type != si.EventConfigSet || got[1].Type != si.EventConfigSet || got[2].Type != si.EventDigest {
			t.Fatalf("delivered %d: %+v", len(got), got)
		}
		if d := got[2]; len(d.Digest) != 4 || d.Message != "4 events: 4 config_set" {
			t.Errorf("digest %q with %d events", d.Message, len(d.Digest))
		}
		if w := at[2].Sub(start); w != time.Minute {
			t.Errorf("digest sent after %v, want at the end of the 1-minute window", w)
		}
		l.Close()
	})
}

// Close delivers what is queued within its deadline: one by one while the
// burst limit allows (before, whatever was queued at Close came as one
// digest, burst or not), as one digest beyond it.
func TestCloseDrainsTheQueue(t *testing.T) {
	for _, tt := range []struct {
		limit, delivered, digest int
	}{{0, 4, 0}, {2, 2, 3}} {
		t.Run(fmt.Sprint("limit ", tt.limit), func(t *testing.T) { closeDrains(t, tt.limit, tt.delivered, tt.digest) })
	}
}

// closeDrains emits 4 events to a notifier that blocks for a second, and
// closes the loop: delivered events come, the last a digest of digest
// events when digest is not 0.
func closeDrains(t *testing.T, limit, delivered, digest int) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		var got []si.Event
		n := si.NotifierFunc(func(ctx context.Context, e si.Event) error {
			<-block
			got = append(got, e)
			return nil
		})
		l, emit := looptest.DeliveryLoop(t, n, si.NotifyOptions{BurstLimit: limit}, nil)
		for i := range 4 {
			emit(fmt.Sprint(i))
		}
		go func() { time.Sleep(time.Second); close(block) }()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		digests := 0
		for _, e := range got {
			if e.Type == si.EventDigest {
				digests++
			}
		}
		if len(got) != delivered || digest == 0 && digests > 0 || digest > 0 && (got[len(got)-1].Type != si.EventDigest || len(got[len(got)-1].Digest) != digest) {
			t.Fatalf("delivered %d events, %d digests: %+v", len(got), digests, got)
		}
	})
}

func TestDailySummary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		events := func() []si.Event { evs, _ := rec.all(); return evs }
		// The bubble starts at midnight UTC, 2000-01-01.
		l := looptest.NewLoop(t, si.WithNotifier(rec), si.WithDailySummary(9*time.Hour),
			si.WithNotifyOptions(si.NotifyOptions{BurstLimit: -1}), si.WithStrategy(&si.BuiltinStrategy{}))
		defer l.Close()
		ctx := context.Background()
		for i := range 14 {
			err := error(nil)
			if i < 2 {
				err = errors.New("503 service unavailable")
			}
			l.ExecuteWithImprovement(ctx, "search", func(context.Context, si.Config) error { return err })
		}
		l.ExecuteWithImprovement(ctx, "chat", func(context.Context, si.Config) error { return nil })
		s := l.DailySummary()
		if len(s.Agents) != 2 || s.Agents[0].AgentID != "chat" || s.Agents[1].AgentID != "search" {
			t.Fatalf("summary %+v", s)
		}
		a := s.Agents[1]
		if a.Stats.CallsPerDay != 14 || a.Stats.SuccessRate != 12.0/14 || a.Applied != 1 || a.Confirmed != 1 || a.RolledBack != 0 || a.Health <= 0.8 {
			t.Errorf("search: %+v", a)
		}
		time.Sleep(9*time.Hour + time.Second)
		var sums []si.Event
		for _, e := range events() {
			if e.Type == si.EventDailySummary {
				sums = append(sums, e)
			}
		}
		if len(sums) != 1 || !sums[0].Time.Equal(time.Date(2000, 1, 1, 9, 0, 0, 0, time.UTC)) || len(sums[0].Summary.Agents) != 2 {
			t.Fatalf("summaries %+v", sums)
		}
		time.Sleep(24 * time.Hour)
		if c := countType(events(), si.EventDailySummary); c != 2 {
			t.Errorf("%d summaries after a day more, want 2", c)
		}
	})
}

func countType(evs []si.Event, t si.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == t {
			n++
		}
	}
	return n
}

// validated is a Notifier with a Validate method that returns err.
type validated struct{ err error }

func (validated) Notify(context.Context, si.Event) error { return nil }
func (v validated) Validate() error                      { return v.err }

// New calls each notifier's Validate and wraps its error; nil notifiers
// are skipped, and with none notifications are off.
func TestWithNotifierValidates(t *testing.T) {
	bad := errors.New("bad address")
	for _, opt := range []si.Option{si.WithNotifier(validated{bad}), si.WithNotifier(validated{}, nil, &validated{bad})} {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), opt)
		if err == nil {
			l.Close()
			t.Fatal("New accepted a notifier whose Validate fails")
		}
		if !errors.Is(err, si.ErrInvalidOption) || !errors.Is(err, bad) || !strings.Contains(err.Error(), "WithNotifier") {
			t.Errorf("error %v", err)
		}
	}
	for _, opt := range []si.Option{si.WithNotifier(), si.WithNotifier(nil, nil)} {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithStrategy(nil), opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetConfig("a", si.Config{Route: "x"}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if m := l.Metrics(); m.Notified != 0 || m.NotifyErrors != 0 || m.NotifyDropped != 0 {
			t.Errorf("notifications off, yet %+v", m)
		}
	}
}

// Without WithNotifier, events are logged through the loop's logger with
// their attributes (Event.LogValue), each at its Level: an operator's
// action at Debug, a rollback at Warn, a digest as its events.
func TestDefaultNotifierLogs(t *testing.T) {
	synctest.Test(t, testDefaultNotifierLogs)
}

func testDefaultNotifierLogs(t *testing.T) {
	logs := &looptest.Buffer{}
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithStrategy(nil),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetConfig("a", si.Config{Route: "x"}); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // delivered alone, not in Close's digest
	si.TestingEmit(l, si.Event{ID: "r1", Type: si.EventRolledBack, AgentID: "b", Message: "rolled back", Err: "boom",
		Change: &si.Change{From: si.Config{Version: 1}, To: si.Config{Version: 2}}})
	synctest.Wait()
	si.TestingEmit(l, si.Event{ID: "d1", Type: si.EventDigest, Message: "2 events", Digest: []si.Event{
		{ID: "c1", Type: si.EventChangeConfirmed, AgentID: "c", Message: "confirmed"},
		{ID: "p1", Type: si.EventProposalFiled, AgentID: "c", Message: "filed"}}})
	synctest.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Contains(out, "event=digest") || strings.Contains(out, "2 events") {
		t.Errorf("a digest logged as one line:\n%s", out)
	}
	for _, want := range []string{
		`level=DEBUG msg="selfimprove: agent \"a\": config set to v2 by operator" event=config_set agent=a id=`, "from_version=1 to_version=2\n",
		`level=INFO msg="selfimprove: confirmed" event=change_confirmed agent=c id=c1`,
		`level=WARN msg="selfimprove: filed" event=proposal_filed agent=c id=p1`,
		`level=WARN msg="selfimprove: rolled back" event=rolled_back agent=b id=r1 from_version=1 to_version=2 error=boom`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if m := l.Metrics(); m.Notified != 3 {
		t.Errorf("notified %d, want 3", m.Notified)
	}
}

// redeliverErr is a delivery error that asks, or not, for redelivery,
// with a wait.
type redeliverErr struct {
	again bool
	wait  time.Duration
}

func (e redeliverErr) Error() string             { return fmt.Sprintf("redeliver %v after %v", e.again, e.wait) }
func (e redeliverErr) Redeliver() bool           { return e.again }
func (e redeliverErr) RetryAfter() time.Duration { return e.wait }

// retryableErr has the method the loop no longer reads: Retryable is the
// call's retry policy's word, not delivery's.
type retryableErr struct{}

func (retryableErr) Error() string   { return "retryable" }
func (retryableErr) Retryable() bool { return true }

// failing is a notifier that fails with errs in turn, then succeeds, and
// records when it was called.
type failing struct {
	mu   sync.Mutex
	errs []error
	at   []time.Time
}

func (f *failing) Notify(context.Context, si.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Now())
	if i := len(f.at) - 1; i < len(f.errs) {
		return f.errs[i]
	}
	return nil
}

func (f *failing) waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var w []time.Duration
	for i := 1; i < len(f.at); i++ {
		w = append(w, f.at[i].Sub(f.at[i-1]))
	}
	return w
}

// Redelivery, with the exact waits between attempts (fake time): the
// error's RetryAfter, exponential backoff, none for an error that does not
// ask (Redeliver false, no such method, or only Retryable), and the
// first error in a chain decides.
func TestRedelivery(t *testing.T) {
	cases := []struct {
		name              string
		errs              []error
		waits             []time.Duration
		notified, errored int64
	}{
		{"RetryAfter", []error{redeliverErr{true, 7 * time.Second}}, []time.Duration{7 * time.Second}, 1, 0},
		{"backoff", []error{redeliverErr{again: true}, fmt.Errorf("wrapped: %w", redeliverErr{again: true})},
			[]time.Duration{time.Second, 2 * time.Second}, 1, 0},
		{"attempts run out", []error{redeliverErr{again: true}, redeliverErr{again: true}, redeliverErr{again: true}, redeliverErr{again: true}},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, 0, 1},
		{"Redeliver false", []error{redeliverErr{}}, nil, 0, 1},
		{"first in the chain decides", []error{fmt.Errorf("%w: %w", redeliverErr{}, redeliverErr{again: true})}, nil, 0, 1},
		{"no method", []error{errors.New("refused")}, nil, 0, 1},
		{"Retryable is not Redeliver", []error{retryableErr{}}, nil, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &failing{errs: c.errs}
				l, emit := looptest.DeliveryLoop(t, f, si.NotifyOptions{}, nil)
				emit("r1")
				time.Sleep(time.Minute)
				l.Close()
				if w := f.waits(); fmt.Sprint(w) != fmt.Sprint(c.waits) {
					t.Errorf("waits %v, want %v", w, c.waits)
				}
				if m := l.Metrics(); m.Notified != c.notified || m.NotifyErrors != c.errored {
					t.Errorf("notified %d, errors %d; want %d, %d", m.Notified, m.NotifyErrors, c.notified, c.errored)
				}
			})
		})
	}
}

// Each notifier given to WithNotifier is retried on its own: the one that
// succeeded is not sent the event again.
func TestNotifiersRetryEachOnItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok, flaky := &failing{}, &failing{errs: []error{redeliverErr{again: true}}}
		l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(ok, flaky))
		if err := l.SetConfig("a", si.Config{Route: "r1"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		l.Close()
		if a, b := len(ok.at), len(flaky.at); a != 1 || b != 2 {
			t.Fatalf("calls: %d to the healthy one (want 1), %d to the flaky one (want 2)", a, b)
		}
		if m := l.Metrics(); m.Notified != 2 || m.NotifyErrors != 0 {
			t.Errorf("notified %d, errors %d; want 2, 0", m.Notified, m.NotifyErrors)
		}
	})
}

// Without WithDir, New says once where it keeps the state (issue 32).
func TestDefaultDirIsLogged(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", dir)
	logs := &looptest.Buffer{}
	l, err := si.New(si.WithStrategy(nil), si.WithNotifier(nil), si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if want := "level=INFO msg=\"selfimprove: keeping state in " + filepath.Join(dir, "selfimprove"); strings.Count(logs.String(), want) != 1 {
		t.Errorf("log lacks one %s:\n%s", want, logs.String())
	}
}

// Events still queued when Close's wait for the notifiers ends are logged
// as left at Close, not as dropped for a full queue: before, the line
// said "notifier queue full" for 3 events the queue of 8 had room for.
func TestDropsAtCloseSayWhy(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{}, 1)
	logs := &looptest.Buffer{}
	n := si.NotifierFunc(func(ctx context.Context, e si.Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	})
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n),
		si.WithNotifyOptions(si.NotifyOptions{Queue: 8, BurstLimit: -1, Timeout: 50 * time.Millisecond}),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	send := func(typ si.EventType) { si.TestingEmit(l, si.Event{ID: string(typ), Type: typ, AgentID: "a"}) }
	send(si.EventConfigSet) // in flight
	<-started
	for range 3 {
		send(si.EventChangeConfirmed)
	}
	l.Close()
	out := logs.String()
	if strings.Contains(out, "queue full") {
		t.Errorf("drops at Close logged as a full queue:\n%s", out)
	}
	if !strings.Contains(out, "Close") || !strings.Contains(out, "dropped=") {
		t.Errorf("drops at Close not logged with their cause:\n%s", out)
	}
}
