package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// A notifier that panics on its one event is one failed delivery on
// /metrics: Metrics.NotifyErrors counts it already (panics included), and
// NotifyPanics says how many of those were panics. Before, the two were
// added and the failure was counted twice.
func TestNotifyPanicCountedOnceOnMetrics(t *testing.T) {
	n := si.NotifierFunc(func(context.Context, si.Event) error { panic("notifier bug") })
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n))
	if err := l.SetConfig("a", si.Config{Route: "r"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if m := l.Metrics(); m.NotifyErrors != 1 || m.NotifyPanics != 1 {
		t.Fatalf("metrics: %d errors, %d panics; want 1, 1", m.NotifyErrors, m.NotifyPanics)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	admin.WriteMetrics(w, l, 10)
	w.Flush()
	if want := "selfimprove_notify_failures_total 1\n"; !strings.Contains(buf.String(), want) {
		t.Errorf("/metrics lacks %q:\n%s", want, grepLines(buf.String(), "notify"))
	}
}

func grepLines(text, word string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
