package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func TestServe(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--dir", dir, "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("serve: %q", line)
	}
	u := strings.TrimSuffix(strings.Fields(line[i:])[0], "/")
	env := []string{"SELFIMPROVE_TOKEN=" + token}

	// The directory is locked: mutations with --dir are refused.
	fails(t, nil, 1, "use --url", "approve", "x", "--dir", dir)
	var list admin.AgentList
	ok(t, env, &list, "agents", "--url", u, "--json")
	if len(list.Agents) != 3 {
		t.Errorf("agents over serve: %q", ids(list.Agents))
	}
	var ps admin.ProposalList
	ok(t, env, &ps, "proposals", "--url", u, "--json", "--status", "pending")
	var r admin.Result
	ok(t, env, &r, "reject", ps.Proposals[0].ID, "--reason", "R", "--url", u, "--json")
	if r.Proposal == nil || r.Proposal.Status != si.ProposalRejected {
		t.Errorf("reject over serve = %+v", r)
	}
	fails(t, nil, 1, "in use by a running Loop", "serve", "--dir", dir, "--addr", "127.0.0.1:0")

	t.Run("read-only beside it", func(t *testing.T) {
		ro := exec.CommandContext(ctx, bin, "serve", "--read-only", "--dir", dir, "--addr", "127.0.0.1:0")
		stderr, _ := ro.StderrPipe()
		if err := ro.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stderr).ReadString('\n')
		if err != nil || !strings.Contains(line, "read-only") {
			t.Fatalf("serve --read-only: %q %v", line, err)
		}
		ru := strings.TrimSuffix(strings.Fields(line[strings.Index(line, "http://"):])[0], "/")
		var ps admin.ProposalList
		ok(t, nil, &ps, "proposals", "--url", ru, "--json", "--status", "rejected")
		if len(ps.Proposals) != 1 {
			t.Errorf("rejected proposals over serve --read-only: %+v", ps.Proposals)
		}
		fails(t, env, 1, "mutations are disabled", "reject", ps.Proposals[0].ID, "--reason", "R", "--url", ru)
		ro.Process.Signal(os.Interrupt)
		if err := ro.Wait(); err != nil {
			t.Errorf("serve --read-only after an interrupt: %v", err)
		}
	})

	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(br)
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after an interrupt: %v %s", err, rest)
	}
	// Its work is on disk.
	if p := readOnly(t, dir).Proposals(func(p si.Proposal) bool { return p.ID == ps.Proposals[0].ID }); len(p) != 1 || p[0].Status != si.ProposalRejected {
		t.Errorf("after serve: %+v", p)
	}
}

// TestServeIntakeToken: serve takes an intake token (issue 42, finding
// 3: the sidecar recipe handed agents the admin token, which can set any
// config) and a score token, each for its agents only, from the
// environment or a file; either without its agents, or equal to another,
// is a usage error.
func TestServeIntakeToken(t *testing.T) {
	const intakeTok, scoreTok = "intake-0123456789abcdef", "judge-0123456789abcdef"
	file := filepath.Join(t.TempDir(), "score-token")
	if err := os.WriteFile(file, []byte(scoreTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "state")
	u, line := startServe(t, []string{"SELFIMPROVE_TOKEN=" + token, "SELFIMPROVE_INTAKE_TOKEN=" + intakeTok},
		"--dir", dir, "--create", "--intake-agent", "py-*", "--score-token-file", file, "--score-agent", "judged")
	if !strings.Contains(line, "the intake token reports for py-*; the score token scores judged") || strings.Contains(line, intakeTok) {
		t.Errorf("serve's line: %q", line)
	}
	outcome := func(agent string) string {
		return `{"outcomes": [{"agent": "` + agent + `", "success": false, "status": 503, "duration_ms": 5, "config_version": 1}]}`
	}
	for _, c := range []struct {
		tok, method, path, body string
		want                    int
	}{
		{intakeTok, "POST", "/api/outcomes", outcome("py-summarize"), 200},
		{intakeTok, "GET", "/api/agents/py-summarize/config", "", 200},
		{intakeTok, "POST", "/api/outcomes", outcome("orders"), 403},
		{intakeTok, "GET", "/api/agents/orders/config", "", 403},
		{intakeTok, "POST", "/api/agents/py-summarize/config", `{"config": {"max_attempts": 9}}`, 403},
		{intakeTok, "GET", "/api/agents", "", 403},
		{scoreTok, "POST", "/api/outcomes", outcome("py-summarize"), 403},
		{scoreTok, "POST", "/api/agents/py-summarize/score", `{"call_id": "0123456789abcdef", "score": 1}`, 403},
		{scoreTok, "POST", "/api/agents/judged/score", `{"call_id": "0123456789abcdef", "score": 1}`, 404},
		{token, "POST", "/api/outcomes", outcome("orders"), 200},
	} {
		req, _ := http.NewRequest(c.method, u+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s %s with the %.6s… token: %d %s, want %d", c.method, c.path, c.tok, res.StatusCode, b, c.want)
		}
	}
	state := t.TempDir()
	for _, c := range []struct {
		env        []string
		args, want string
		code       int
	}{
		{[]string{"SELFIMPROVE_INTAKE_TOKEN=" + intakeTok}, "", "the intake token needs --intake-agent", 2},
		{[]string{"SELFIMPROVE_INTAKE_TOKEN="}, "--intake-agent py-*", "--intake-agent needs an intake token", 2},
		{[]string{"SELFIMPROVE_TOKEN=" + intakeTok, "SELFIMPROVE_INTAKE_TOKEN=" + intakeTok}, "--intake-agent py-*", "the intake token is the admin token", 2},
		{[]string{"SELFIMPROVE_INTAKE_TOKEN=" + scoreTok}, "--intake-agent py-* --score-token-file " + file + " --score-agent x", "the intake and score tokens are the same", 2},
		{nil, "--score-token-file " + filepath.Join(state, "none"), "--score-token-file: open", 1},
	} {
		args := append([]string{"serve", "--dir", state, "--addr", "127.0.0.1:0"}, strings.Fields(c.args)...)
		fails(t, c.env, c.code, c.want, args...)
	}
}
