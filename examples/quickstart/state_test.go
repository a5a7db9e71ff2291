package main

import (
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove"
)

// TestQuickStartStateIsCurrent keeps the quick start's state directory
// and reads it as `selfimprove status --dir` does (a read-only store,
// the real clock): the window holds the calls the quick start printed,
// as its simulated calls end at the current time (issue 32: they ran in
// May and status showed CALLS 0).
func TestQuickStartStateIsCurrent(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	if err := run(&b, dir); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`window: (\d+) calls, (\d+)% success`).FindStringSubmatch(b.String())
	if m == nil {
		t.Fatalf("no window line in:\n%s", b.String())
	}
	want, _ := strconv.Atoi(m[1])
	l := readBack(t, dir)
	s := l.Stats("order-lookup")
	if s.Calls != want || want == 0 || strconv.Itoa(int(100*s.SuccessRate+0.5)) != m[2] {
		t.Errorf("read back at the current time: %d calls, %.0f%% success; the quick start printed %s calls, %s%%",
			s.Calls, 100*s.SuccessRate, m[1], m[2])
	}
}

// readBack opens a Loop on a ReadOnlyStore of dir, as `selfimprove status
// --dir` does; the test closes it.
func readBack(t *testing.T, dir string) *selfimprove.Loop {
	t.Helper()
	ro, err := selfimprove.OpenReadOnlyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil),
		selfimprove.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestQuickStartRefusesItsOwnState: a second run in the same -dir (the
// README and docs/cli.md both give the command) is refused with how to
// go on, and leaves the first run's state as it was. Before, it went on
// from that state, printed the hang's story under the same header while
// running on v3 from its first call, and doubled the counts status shows.
func TestQuickStartRefusesItsOwnState(t *testing.T) {
	dir := t.TempDir()
	if err := run(io.Discard, dir); err != nil {
		t.Fatal(err)
	}
	before := readBack(t, dir).Stats("order-lookup").Calls
	var b strings.Builder
	err := run(&b, dir)
	if err == nil || !strings.Contains(err.Error(), "already holds state") || b.Len() != 0 {
		t.Errorf("a second run in the same directory: error %v, printed %q; want a refusal that prints nothing", err, b.String())
	}
	if after := readBack(t, dir).Stats("order-lookup").Calls; after != before {
		t.Errorf("the refused run changed the state: %d calls, %d before", after, before)
	}
}
