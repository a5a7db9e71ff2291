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
	for _, want := range []string{
		`route now "` + newModel + `"`,
		`a 429 with retry-after: 1: "{\"answer\": 42}", error <nil>, after 1s`,
		`an answer that is not JSON: "{\"answer\": 42}", error <nil>, after 0s`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "  run ") {
		t.Error("a run failed")
	}
}
