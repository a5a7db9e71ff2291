package main

import (
	"os"
	"strings"
	"testing"
)

func TestNestedExample(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// The task's retry re-runs its steps, and the budget stops the
		// third step of the second attempt: 7 requests, not 9.
		"attempt 1  tool-2  failed after 2 attempts: tool-2: 503 service unavailable",
		"attempt 2  tool-2  ok after 1 attempt",
		"attempt 2  tool-3  refused: selfimprove: budget spent",
		"7 requests sent",
		"the most requests a task sent: 7\n",
		// tool-2 fixes itself; the task agent keeps the config it was
		// given, its failures left to the steps they came from.
		"change v2→v3 confirmed: overloaded: attempts 2 → 3",
		"task   config v2, 2 attempts a call\n",
		"(passed on from answer, left to it)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if i := strings.Index(out, "task   config"); strings.Contains(out[i:], "change v") {
		t.Errorf("the task agent changed its config:\n%s", out[i:])
	}
	// The guide shows the output from its first task on (it said 17×
	// where the program prints 13×).
	guide, err := os.ReadFile("../../docs/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := out[strings.Index(out, "One task"):]
	if !strings.Contains(string(guide), "```\n"+shown+"```\n") {
		t.Errorf("docs/guide.md does not show the nested example's output; it prints:\n%s", shown)
	}
}
