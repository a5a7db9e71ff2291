package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestExample(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log(out)
	for _, want := range []string{`the loop moves the route to "` + newModel + `"`, `route now "` + newModel + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := strings.Count(out, "success true, 2 attempts"); n != 2 {
		t.Errorf("%d storm calls succeeded on their second attempt, want 2", n)
	}
	// Out of the box (the transient floor, MaxAttempts 0), the first
	// attempt runs without the loop's attempt context: the wait comes
	// from the headers the SDK's error keeps rather than the transport's.
	if n := len(regexp.MustCompile(`waited 1s \((header retry-after|error RetryAfter)\)`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d storm retries waited the server's 1s, want 2", n)
	}
}
