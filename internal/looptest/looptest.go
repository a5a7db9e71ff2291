// Package looptest holds the helpers that the tests of the root package
// and of the packages and modules built on it (notify, cmd, e2e) share: a Loop opened for a
// test, a log destination safe for concurrent writes, and a Loop whose
// notifier a test watches.
package looptest

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// Quiet is a logger that writes nothing.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// NewLoop opens a Loop in a temporary directory, quiet, without a
// notifier and with no minimum of calls before a change unless opts set
// them. It reads the real clock, which is fake inside a synctest bubble.
func NewLoop(t *testing.T, opts ...si.Option) *si.Loop {
	t.Helper()
	base := []si.Option{si.WithDir(t.TempDir()), si.WithLogger(Quiet), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1})}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Buffer is a log destination safe for concurrent writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// DeliveryLoop opens, with NewLoop, a loop whose notifier is n and
// returns it with a function that emits an event through it (an
// operator action: SetConfig). Its logs go to logs (nil: nowhere).
func DeliveryLoop(t *testing.T, n si.Notifier, o si.NotifyOptions, logs io.Writer) (*si.Loop, func(route string)) {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	l := NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n), si.WithNotifyOptions(o),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	return l, func(route string) {
		if err := l.SetConfig("a", si.Config{Route: route}); err != nil {
			t.Fatal(err)
		}
	}
}
