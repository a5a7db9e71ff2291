package main

import (
	"strings"
	"testing"
)

func TestQuickstartTimeline(t *testing.T) {
	var b strings.Builder
	if err := run(&b, ""); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"APPLIED   v2: the primary times out: try the mirror",
		"ROLLED BACK v2 → v1: all 9 calls under v2 failed, as did all 3 before: it fixed nothing; 9 consecutive failures (limit 9)",
		"APPLIED   v3: the mirror was rolled back: try the backup region",
		// The verdicts start in plain words; no latency compared with a
		// figure never taken (it read "(was 0s)").
		"CONFIRMED v3: all 10 calls under v3 succeeded, against none of the 15 before; average latency 40ms (no earlier figure);",
		"Now running config v3 (route backup)",
		// After the rollback the next candidate comes 10 minutes later
		// (3 failures), not after the 6-hour cooldown (30).
		"4:00–4:20  v1   3 calls failed",
		`6× timeout    (tool_failure, new, cluster 31b623c915eec895) "context deadline exceeded"`,
		`9× overloaded (tool_failure, new, cluster b3161b845720543d) "mirror: <n> service unavailable"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "APPLIED") != 2 {
		t.Errorf("want exactly two tweaks applied:\n%s", out)
	}
}
