package notify_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newBubbleLoop opens a Loop in a temporary directory, quiet and without
// a notifier unless opts set them.
func newBubbleLoop(t *testing.T, opts ...si.Option) *si.Loop {
	t.Helper()
	base := []si.Option{si.WithDir(t.TempDir()), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1})}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
