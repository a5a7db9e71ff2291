package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// The agents "." and ".." are agents like any: agent NAME shows them,
// with --dir and --url alike, and an empty NAME is a usage error. Before,
// HTTP path cleaning took "." for the agent list (exit 0, an empty
// agent), and ".." and "" for "no selfimprove API at …" (exit 1).
func TestDotAgentIDs(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLoop(t, dir, time.Now())
	for _, id := range []string{".", ".."} {
		if _, err := l.Record(context.Background(), id, si.Report{Duration: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	u, _ := startServe(t, []string{"SELFIMPROVE_TOKEN=" + token}, "--dir", dir)
	for _, where := range [][]string{{"--dir", dir}, {"--url", u}} {
		env := []string{"SELFIMPROVE_TOKEN=" + token}
		for _, id := range []string{".", ".."} {
			var d admin.AgentDetail
			ok(t, env, &d, append([]string{"--json", "agent", id}, where...)...)
			if d.ID != id || d.Stats.Calls != 1 {
				t.Errorf("agent %q %s: %+v", id, where[0], d.AgentSummary)
			}
		}
		fails(t, env, 2, "an argument is empty", append([]string{"agent", ""}, where...)...)
	}
}

// serve --token-file with an empty file refuses to start (exit 2): a
// token not written yet would open every read to anyone. Before, it
// served with no token.
func TestServeEmptyTokenFile(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	for _, content := range []string{"", " \n\t\n"} {
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		fails(t, nil, 2, "is empty", "serve", "--dir", dir, "--addr", "127.0.0.1:0", "--token-file", f)
	}
}

// agents --json is the API's AgentList, its time included; status
// --limit out of 1..1000 is a usage error, as events --limit is. Before,
// "now" was the zero time, and status clamped the limit.
func TestAgentsJSONAndStatusLimit(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	var list admin.AgentList
	ok(t, nil, &list, "agents", "--dir", dir, "--json")
	if list.Now.IsZero() || len(list.Agents) == 0 {
		t.Errorf("agents --json: now %v, %d agents", list.Now, len(list.Agents))
	}
	for _, n := range []string{"0", "-1", "1001"} {
		fails(t, nil, 2, "--limit", "status", "--dir", dir, "--limit", n)
	}
}

// Against serve --read-only, a mutation's refusal is the server's own
// word, without advice to check the token (the token is right).
func TestReadOnlyRefusalNoTokenHint(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	u, _ := startServe(t, []string{"SELFIMPROVE_TOKEN=" + token}, "--read-only", "--dir", dir)
	r := cli(t, []string{"SELFIMPROVE_TOKEN=" + token}, "rewind", "alpha", "1", "--reason", "r", "--url", u)
	if r.code != 1 || !strings.Contains(r.stderr, "read-only") || strings.Contains(r.stderr, "check the admin token") {
		t.Errorf("rewind against serve --read-only: exit %d, %q", r.code, r.stderr)
	}
}
