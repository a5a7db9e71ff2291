package main

import (
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
	if n := strings.Count(out, "waited 1s (header retry-after)"); n != 2 {
		t.Errorf("%d storm retries waited the server's 1s, want 2", n)
	}
}
