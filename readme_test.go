package selfimprove_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// readmeMaxBytes is the size README.md must stay under: the README is the
// short entry point, and the details live in docs/.
const readmeMaxBytes = 15360

// TestReadmeBasics checks that README.md stays short and keeps the lines a
// newcomer copies: the install command and the test command.
func TestReadmeBasics(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(readme) >= readmeMaxBytes {
		t.Errorf("README.md is %d bytes, want fewer than %d: move details to docs/", len(readme), readmeMaxBytes)
	}
	for _, want := range []string{
		"go get github.com/self-improving-loop/selfimprove",
		"go test -race -timeout 20m work && go -C integrations/genkit test -race ./...",
		"go run ./examples/quickstart",
		"(docs/glossary.md)",
	} {
		if !bytes.Contains(readme, []byte(want)) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// TestReadmeExampleBuilds builds the README's usage example (its first Go
// code block) and the quick start in a fresh module of their own, which
// requires this module through a replace directive. An example that stops
// compiling, or that reaches into the module's internal packages, fails.
func TestReadmeExampleBuilds(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the README's example cannot be built")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, ok := firstGoBlock(string(readme))
	if !ok {
		t.Fatal("README.md has no ```go code block")
	}
	if !strings.HasPrefix(example, "package main\n") {
		t.Fatalf("the README's first Go block must be a whole program, starting with \"package main\"; it starts with %q", firstLine(example))
	}
	quickstart, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	goSum, err := os.ReadFile("go.sum")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}

	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/readme\n\ngo " + string(goVersion[1]) + "\n\n" +
			"require github.com/self-improving-loop/selfimprove v0.0.0\n\n" +
			"replace github.com/self-improving-loop/selfimprove => " + strconv.Quote(root) + "\n",
		"go.sum":             string(goSum),
		"readme/main.go":     example,
		"quickstart/main.go": string(quickstart),
	}
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// With a warm build cache this takes a few seconds. A cold cache on a
	// busy machine takes minutes (the standard library is compiled too); a
	// hung toolchain must fail the test rather than stall it.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Build both programs, then vet them for what the compiler accepts.
	for _, verb := range []string{"build", "vet"} {
		cmd := exec.CommandContext(ctx, goBin, verb, "./...")
		cmd.Dir = dir
		cmd.WaitDelay = 10 * time.Second
		// The module needs nothing but this repository, so the build runs
		// offline, outside any workspace, and may write its go.mod.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
		out, err := cmd.CombinedOutput()
		if err == nil {
			continue
		}
		msg := fmt.Sprintf("go %s, in a module of its own, of the README's usage example (its first ```go block, in readme/) and of examples/quickstart/main.go (in quickstart/): %v\n%s", verb, err, out)
		if bytes.Contains(out, []byte("readme/")) {
			msg += "\nthe README's usage example:\n" + numbered(example)
		}
		t.Fatal(msg)
	}
}

// TestDocLinks checks that every relative link of README.md and docs/*.md
// names a file that exists and, for a link into a Markdown file, a heading
// that file has.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md"}, pages...)
	if len(pages) < 2 {
		t.Fatal("no pages in docs/")
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range proseLines(string(b)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s links to %s, which does not exist", page, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
					t.Errorf("%s links to %s, but %s has no heading with the anchor %q", page, target, path, anchor)
				}
			}
		}
	}
}

// TestHeadingAnchors checks the anchor rule TestDocLinks relies on, so that
// a link it accepts also works where the pages are rendered.
func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Top\n\n## The loop's own failures\n\n```sh\n# not a heading\n```\n\n### Signatures, clusters and trend\n## `Similar` and k\n## Top\n")
	for _, want := range []string{"top", "the-loops-own-failures", "signatures-clusters-and-trend", "similar-and-k", "top-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}

// firstGoBlock returns the body of the first ```go fenced block of md.
func firstGoBlock(md string) (string, bool) {
	_, rest, ok := strings.Cut(md, "\n```go\n")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		return "", false
	}
	return body + "\n", true
}

// proseLines returns the lines of md outside fenced code blocks.
func proseLines(md string) []string {
	var out []string
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of md: the
// heading in lower case, with spaces turned into hyphens and every other
// character but letters, digits, hyphens and underscores dropped; a
// repeated anchor gets -1, -2, and so on.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(md) {
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// numbered returns src with line numbers, to match a compiler's messages.
func numbered(src string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(src, "\n"), "\n") {
		b.WriteString(strconv.Itoa(i+1) + "\t" + line + "\n")
	}
	return b.String()
}

// TestOneTokenVariable checks that the admin token has one environment
// variable everywhere (issue 32): the code, the examples and the docs name
// SELFIMPROVE_TOKEN, never another *_TOKEN of the loop's own (a chat
// service's token, such as TELEGRAM_BOT_TOKEN, is the user's).
func TestOneTokenVariable(t *testing.T) {
	re := regexp.MustCompile(`\b[A-Z][A-Z0-9_]*_TOKEN\b`)
	allowed := map[string]bool{"SELFIMPROVE_TOKEN": true, "TELEGRAM_BOT_TOKEN": true}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); d.IsDir() || ext != ".go" && ext != ".md" && ext != ".py" && ext != ".sh" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllString(string(b), -1) {
			if !allowed[m] {
				t.Errorf("%s names %s; the admin token's variable is SELFIMPROVE_TOKEN", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGlossaryCoversTheJargon checks that docs/glossary.md defines the
// words a newcomer meets in the README, the CLI and the dashboard
// without an explanation (issue 32).
func TestGlossaryCoversTheJargon(t *testing.T) {
	g, err := os.ReadFile("docs/glossary.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"route", "profile", "analysis window", "health", "proposal", "canary", "sequential",
		"fixed", "quick test", "reference", "cluster", "cooldown", "transient floor", "probe", "fallback", "dead route"} {
		if !regexp.MustCompile(`\*\*` + regexp.QuoteMeta(w) + `\*\*`).Match(g) {
			t.Errorf("docs/glossary.md does not define %q", w)
		}
	}
	if readme, err := os.ReadFile("README.md"); err != nil || !strings.Contains(string(readme), "](docs/glossary.md)") {
		t.Errorf("README.md does not link the glossary (%v)", err)
	}
}
