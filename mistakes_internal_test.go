package selfimprove

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestMistakeIsCheap: a call with a bad ID that is not logged allocates
// no more than its error does (fmt.Errorf's few allocations), however
// long the ID: the rate limiter hashes its first 64 bytes.
func TestMistakeIsCheap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l, err := New(WithStore(NewRAMStore()), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	long := strings.Repeat("x", 64<<20)
	fn := func(context.Context, Config) error { return nil }
	l.ExecuteWithImprovement(context.Background(), long, fn)
	if n := testing.AllocsPerRun(100, func() { l.ExecuteWithImprovement(context.Background(), long, fn) }); n > 6 {
		t.Errorf("%v allocations a call with a bad ID, want at most 6 (its error's)", n)
	}
}

// TestQuoteCut: a caller's text in a message or a log line is quoted,
// cut to 64 bytes, at most 261 bytes in all, and names its start.
func TestQuoteCut(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"agent-1", `"agent-1"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 65), `"` + strings.Repeat("a", 64) + `"…`},
		{strings.Repeat("a", 63) + "é", `"` + strings.Repeat("a", 63) + `"…`}, // not mid-rune
		{strings.Repeat("\xff", 100), `"` + strings.Repeat(`\xff`, 64) + `"…`},
		{"a\nb\x00", `"a\nb\x00"`},
	} {
		if got := quoteCut(c.in, maxQuoted); got != c.want {
			t.Errorf("quoteCut(%.20q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, s := range []string{strings.Repeat("\xff", 1000), strings.Repeat("\U0010ffff", 100), strings.Repeat("\u2028", 100)} {
		if got := quoteCut(s, maxQuoted); len(got) > 4*maxQuoted+5 || !utf8.ValidString(got) {
			t.Errorf("quoteCut(%.20q): %d bytes, over %d", s, len(got), 4*maxQuoted+5)
		}
	}
}
