package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsShowTheQuickStart runs the quick start and checks the docs that
// quote it (issue 32): the timeline in the README and in the guide is the
// one it prints, line for line, and every time, count and limit the
// guide's narrative names is in that timeline.
func TestDocsShowTheQuickStart(t *testing.T) {
	var b strings.Builder
	if err := run(&b, ""); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	start := strings.Index(out, "\n\n") + 2
	timeline := out[start : start+strings.Index(out[start:], "\n\n")+1]
	for _, doc := range []string{"../../README.md", "../../docs/guide.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "```\n"+timeline+"```\n") {
			t.Errorf("%s does not show the quick start's timeline; it prints:\n%s", doc, timeline)
		}
	}
	guide, err := os.ReadFile("../../docs/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	g := string(guide)
	story := g[strings.Index(g, "What happened"):strings.Index(g, "The summary shows")]
	for _, m := range regexp.MustCompile(`\*\*(\d+:\d\d)[.*]|(\d+:\d\d) to (\d+:\d\d)`).FindAllStringSubmatch(story, -1) {
		for _, when := range m[1:] {
			if when != "" && !regexp.MustCompile(`(^|[\s–])`+when+`[\s–]`).MatchString(timeline) {
				t.Errorf("the guide's narrative names %s, which is not a time in the timeline", when)
			}
		}
	}
	for _, m := range regexp.MustCompile(`(\d+) calls in a row|(\d+) calls under v\d|\((\d+) calls, all failures\)`).FindAllStringSubmatch(story, -1) {
		n := m[1] + m[2] + m[3]
		if !regexp.MustCompile(`\b` + n + ` (consecutive|calls)`).MatchString(timeline) {
			t.Errorf("the guide's narrative says %q; the timeline has no such count", m[0])
		}
	}
	if !strings.Contains(story, "(15 calls, all failures)") || !strings.Contains(timeline, "none of the 15 before") {
		t.Errorf("the guide's reference count does not match the timeline's")
	}
}
