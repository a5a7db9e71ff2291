package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// The first hour with the command (issue 43).

// TestNotAStateDir: --dir on a directory that holds no agents/ fails, on
// one line naming the directory and what a state directory holds, with
// exit code 1 (item 1: status printed "0 agents" and a raw ERROR line,
// and exited 0).
func TestNotAStateDir(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"status"}, {"agents"}, {"events"}, {"mcp"}, {"approve", "x"}, {"serve", "--read-only", "--addr", "127.0.0.1:0"}, {"serve", "--addr", "127.0.0.1:0"}} {
		fails(t, nil, 1, dir+" is not a state directory", append(args, "--dir", dir)...)
		r := cli(t, nil, append(args, "--dir", dir)...)
		if !strings.Contains(r.stderr, "agents/") || !strings.Contains(r.stderr, "events.jsonl") || strings.Contains(r.stderr, "level=") {
			t.Errorf("%q: stderr %q, want what a state directory holds, and no log line", args, r.stderr)
		}
	}
}

// TestWrongMountPath: --url that does not serve the admin API (a wrong
// mount path) says so, with exit code 1, not 3 "no agent" (item 2).
func TestWrongMountPath(t *testing.T) {
	dir := t.TempDir()
	live, _ := openLoop(t, dir, writeState(t, dir))
	defer live.Close()
	h := admin.Handler(live, admin.Options{Logger: quiet()})
	atRoot := httptest.NewServer(h) // as selfimprove serve mounts it
	defer atRoot.Close()
	mounted := httptest.NewServer(http.StripPrefix("/si", h))
	defer mounted.Close()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><p>some other site</p>")
	}))
	defer page.Close()
	for _, u := range []string{atRoot.URL + "/wrong", mounted.URL + "/wrong/", mounted.URL, page.URL + "/selfimprove"} {
		base := strings.TrimSuffix(u, "/")
		for _, args := range [][]string{{"agent", "alpha"}, {"agents"}, {"status"}, {"approve", "x"}, {"rewind", "alpha", "1", "--reason", "R"}, {"events", "-f"}} {
			fails(t, nil, 1, "no selfimprove API at "+base+" (", append(args, "--url", u)...)
			fails(t, nil, 1, "check the mount path", append(args, "--url", u)...)
		}
	}
	for _, u := range []string{atRoot.URL, mounted.URL + "/si"} {
		ok(t, nil, nil, "agent", "alpha", "--url", u)
		fails(t, nil, 3, "no agent", "agent", "nobody", "--url", u)
	}
}

// TestServeHostHint: serve's 421 names its --allow-host flag, not the
// Go option behind it (item 4).
func TestServeHostHint(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	u, _ := startServe(t, nil, "--dir", dir)
	req, _ := http.NewRequest("GET", u+"/api/agents", nil)
	req.Host = "rebind.attacker.example"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(b), "--allow-host") || strings.Contains(string(b), "admin.Options") {
		t.Errorf("GET with Host rebind.attacker.example: %d %s, want 421 naming --allow-host", res.StatusCode, b)
	}
}

var healthPct = regexp.MustCompile(`^\d{1,3}\.\d%$`)

// TestHealthPercent: status, agents and agent show health as a
// percentage, as the dashboard does ("87.0%", not "0.87"; item 5).
func TestHealthPercent(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	for _, cmd := range []string{"status", "agents"} {
		out := ok(t, nil, nil, cmd, "--dir", dir)
		col, rows := -1, 0 // the HEALTH column's offset: the table is aligned, and STATE has spaces
		for line := range strings.Lines(out) {
			if col < 0 {
				if strings.HasPrefix(line, "AGENT ") {
					col = strings.Index(line, " HEALTH ") + 1
				}
				continue
			}
			if len(line) <= col || strings.HasPrefix(line, "Recent events") || strings.HasPrefix(line, "TIME") {
				break
			}
			f := strings.Fields(line[col:])
			if rows++; len(f) == 0 || !healthPct.MatchString(f[0]) {
				t.Errorf("%s: health %q, want a percentage, in\n%s", cmd, f, out)
			}
		}
		if rows != 3 {
			t.Errorf("%s: %d agent rows with a HEALTH column, want 3, in\n%s", cmd, rows, out)
		}
	}
	out := ok(t, nil, nil, "agent", "alpha", "--dir", dir)
	if !regexp.MustCompile(`(?m)^Health:\s+\d{1,3}\.\d% `).MatchString(out) {
		t.Errorf("agent alpha: no health as a percentage in\n%s", out)
	}
}

// TestDocsStatusSample: the sample output of docs/cli.md is what status
// prints over the quick start's state, times aside (item 5: it showed
// health as 1.00 and no calls).
func TestDocsStatusSample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick start")
	}
	dir := filepath.Join(t.TempDir(), "qs")
	qs := exec.Command("go", "run", "./examples/quickstart", "-dir", dir)
	qs.Dir = filepath.Join("..", "..")
	if out, err := qs.CombinedOutput(); err != nil {
		t.Fatalf("the quick start: %v\n%s", err, out)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "selfimprove status --dir /tmp/qs\n```\n```\n"
	text := string(doc)
	i := strings.Index(text, cmd)
	if i < 0 {
		t.Fatalf("docs/cli.md: no %q", cmd)
	}
	sample := text[i+len(cmd):]
	sample = sample[:strings.Index(sample, "```")]
	// Times aside (the events', and the next step's, "(at 2026-11-29
	// 08:45)"). HEALTH is the success under v3, which does not decay.
	times := regexp.MustCompile(`\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\dZ| \d\d:\d\d)`)
	mask := func(s string) string { return times.ReplaceAllString(s, "TIME") }
	got := mask(ok(t, nil, nil, "status", "--dir", dir))
	if want := mask(sample); got != want {
		t.Errorf("docs/cli.md shows status as\n%s\nit prints\n%s", want, got)
	}
	checkDocsErrors(t, text, dir)
}

// checkDocsErrors checks the sample errors of docs/cli.md against the
// command's, over dir (the quick start's state) served on a loopback
// port: /srv/state is dir, 127.0.0.1:8080 the port.
func checkDocsErrors(t *testing.T, doc, dir string) {
	t.Helper()
	const head = "An error is one line on stderr that says what to do:\n\n```\n"
	i := strings.Index(doc, head)
	if i < 0 {
		t.Fatalf("docs/cli.md: no %q", head)
	}
	sample := doc[i+len(head):]
	sample = sample[:strings.Index(sample, "```")]
	u, _ := startServe(t, nil, "--dir", dir)
	empty := t.TempDir()
	var got strings.Builder
	for _, args := range [][]string{{"approve", "019ca945-c170-7dad-8480-2aef2091eb8f", "--dir", dir}, {"agent", "nobody", "--dir", dir},
		{"rewind", "order-lookup", "1", "--dir", dir}, {"status", "--dir", empty}, {"agents", "--url", u + "/selfimprove"}} {
		got.WriteString(cli(t, nil, args...).stderr)
	}
	want := strings.NewReplacer("/srv/state", dir, "/srv/empty", empty, "http://127.0.0.1:8080", u).Replace(sample)
	if got.String() != want {
		t.Errorf("docs/cli.md shows the errors\n%s\nthe command prints\n%s", want, got.String())
	}
}
