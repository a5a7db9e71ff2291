package selfimprove_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// logLines is a logger's output, one JSON object a line.
type logLines struct {
	looptest.Buffer
	seen int // bytes already taken
}

// take returns the lines logged since the last take, decoded.
func (b *logLines) take(t *testing.T) []map[string]any {
	t.Helper()
	all := b.String()
	fresh := all[b.seen:]
	b.seen = len(all)
	var out []map[string]any
	for line := range strings.Lines(fresh) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// mistakeLoop opens a Loop on a fake clock whose log goes to the
// returned lines.
func mistakeLoop(t *testing.T) (*si.Loop, *fakeclock.Clock, *logLines) {
	t.Helper()
	lines := &logLines{}
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithLogger(slog.New(slog.NewJSONHandler(lines, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clk, lines
}

// untracked makes a call of id that must run fn, untracked, with want in
// its Report.LoopErr.
func untracked(t *testing.T, l *si.Loop, id string, want error) {
	t.Helper()
	ran := false
	rep, err := l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
		ran = true
		return errBoom
	})
	if !ran || err != errBoom || !errors.Is(rep.LoopErr, want) {
		t.Fatalf("call of a %d-byte ID: ran %v, err %v, LoopErr %v; want fn run, its error, and %v", len(id), ran, err, rep.LoopErr, want)
	}
}

// checkLine checks a mistake's log line: level, ID quoted and cut, the
// error, and the count of the calls since the last line.
func checkLine(t *testing.T, line map[string]any, id string, want error, repeated int) {
	t.Helper()
	quoted, _ := line["agent"].(string)
	shown := id[:min(len(id), 64)]
	if line["level"] != "WARN" || !strings.Contains(line["error"].(string), want.Error()) ||
		line["agent_bytes"] != float64(len(id)) || len(quoted) > 4*64+5 ||
		!strings.HasPrefix(quoted, strconv.Quote(shown)[:len(strconv.Quote(shown))-1]) {
		t.Errorf("log line %v: want WARN, %v, the ID's first 64 bytes quoted and its length %d", line, want, len(id))
	}
	if got, _ := line["repeated"].(float64); int(got) != repeated {
		t.Errorf("log line %v: repeated %v, want %d", line, line["repeated"], repeated)
	}
}

// TestMistakesAreLogged: a call with an empty or an oversized agent ID,
// and a call after Close, still run fn and report the error in
// Report.LoopErr, and are logged once a minute at most per mistake.
func TestMistakesAreLogged(t *testing.T) {
	l, clk, lines := mistakeLoop(t)
	huge := strings.Repeat("z", 3<<20)
	for _, c := range []struct {
		name, id string
	}{{"empty", ""}, {"over MaxAgentIDLen", huge}, {"not UTF-8, over MaxAgentIDLen", strings.Repeat("\xff", si.MaxAgentIDLen+1)}} {
		t.Run(c.name, func(t *testing.T) {
			untracked(t, l, c.id, si.ErrInvalidAgentID)
			got := lines.take(t)
			if len(got) != 1 {
				t.Fatalf("%d log lines, want 1: %v", len(got), got)
			}
			checkLine(t, got[0], c.id, si.ErrInvalidAgentID, 0)
			for range 3 {
				clk.Advance(time.Second)
				untracked(t, l, c.id, si.ErrInvalidAgentID)
			}
			if got := lines.take(t); len(got) != 0 {
				t.Fatalf("logged again within the minute: %v", got)
			}
			clk.Advance(time.Minute)
			untracked(t, l, c.id, si.ErrInvalidAgentID)
			got = lines.take(t)
			if len(got) != 1 {
				t.Fatalf("%d log lines a minute on, want 1", len(got))
			}
			checkLine(t, got[0], c.id, si.ErrInvalidAgentID, 3)
		})
	}
	if got := l.Metrics().Agents; got != 0 {
		t.Errorf("%d agents in memory, want none", got)
	}
	l.Close()
	untracked(t, l, "a", si.ErrClosed)
	untracked(t, l, "b", si.ErrClosed) // the same mistake, whatever the ID
	got := lines.take(t)
	if len(got) != 1 || !strings.Contains(got[0]["msg"].(string), "closed") {
		t.Fatalf("after Close: log lines %v, want one saying the loop is closed", got)
	}
	checkLine(t, got[0], "a", si.ErrClosed, 0)
	clk.Advance(time.Minute)
	untracked(t, l, "c", si.ErrClosed)
	if got := lines.take(t); len(got) != 1 {
		t.Fatalf("after Close, a minute on: %d log lines, want 1", len(got))
	} else {
		checkLine(t, got[0], "c", si.ErrClosed, 1)
	}
}

// TestMistakesLogBounded: a flood of distinct bad IDs logs at most 64
// lines a minute, and a line then counts the mistakes not logged.
func TestMistakesLogBounded(t *testing.T) {
	l, clk, lines := mistakeLoop(t)
	const n = 10_000
	for i := range n {
		untracked(t, l, fmt.Sprintf("%08d", i)+strings.Repeat("x", si.MaxAgentIDLen), si.ErrInvalidAgentID)
	}
	got := lines.take(t)
	if len(got) != 64 {
		t.Fatalf("%d distinct bad IDs in a minute: %d log lines, want 64", n, len(got))
	}
	clk.Advance(time.Minute)
	untracked(t, l, "", si.ErrInvalidAgentID)
	got = lines.take(t)
	if len(got) != 1 || got[0]["unlogged"] != float64(n-64) {
		t.Fatalf("a minute on: %v, want one line counting the %d mistakes not logged", got, n-64)
	}
}

// TestEmptyAgentIDRefused: the Loop's methods refuse the empty ID, and
// its getters do not know it.
func TestEmptyAgentIDRefused(t *testing.T) {
	l, _, _ := mistakeLoop(t)
	for name, err := range map[string]error{
		"SetConfig":     l.SetConfig("", si.Config{}),
		"SetThreshold":  l.SetThreshold("", si.Threshold{Failures: 1, Window: time.Hour}),
		"MarkCritical":  l.MarkCritical("", true),
		"ClearRejected": l.ClearRejected(""),
		"SetRoutes":     l.SetRoutes("", si.Routes{Primary: "a"}),
	} {
		if !errors.Is(err, si.ErrInvalidAgentID) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("%s(\"\") = %v, want ErrInvalidAgentID", name, err)
		}
	}
	if _, known := l.View(""); known {
		t.Error("View(\"\") knows the agent")
	}
}
