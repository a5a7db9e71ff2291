package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// python3 returns the python3 interpreter: the test fails without it in CI
// (CI=true), and is skipped without it elsewhere.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed: the sidecar test needs it in CI")
		}
		t.Skip("python3 is not installed: skipping the sidecar test (it runs in CI)")
	}
	return p
}

// TestSidecarPython runs the sidecar recipe of docs/intake.md end to
// end: selfimprove serve --create over a new state directory, and the
// Python client (clients/python, standard library only) running the
// scripted fault of scripted_fault.py against it. The fault reported from
// Python leads to a config change that the Python client reads and
// applies (it retries under the new max_attempts), and the change is
// confirmed; the harmful change of the second agent is rolled back, and
// the client reads its first config again. The loop's state, read over
// the admin API, says the same.
func TestSidecarPython(t *testing.T) {
	py := python3(t)
	dir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "serve", "--dir", dir, "--create", "--addr", "127.0.0.1:0", "--intake-agent", "py-*")
	srv.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token, "SELFIMPROVE_INTAKE_TOKEN="+intakeToken)
	stderr, _ := srv.StderrPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	i := strings.Index(line, "http://")
	if err != nil || i < 0 {
		t.Fatalf("serve: %q %v", line, err)
	}
	u := strings.TrimSuffix(strings.Fields(line[i:])[0], "/")
	defer func() {
		srv.Process.Signal(os.Interrupt)
		rest, _ := io.ReadAll(br)
		if err := srv.Wait(); err != nil {
			t.Errorf("serve after an interrupt: %v %s", err, rest)
		}
	}()

	script := filepath.Join("..", "..", "clients", "python", "scripted_fault.py")
	cmd := exec.CommandContext(ctx, py, script, "--url", u)
	cmd.Env = append(os.Environ(), "SELFIMPROVE_INTAKE_TOKEN="+intakeToken, "PYTHONDONTWRITEBYTECODE=1")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s%s", script, err, out, errOut.String())
	}
	type run struct {
		Agent       string         `json:"agent"`
		Calls       int            `json:"calls"`
		Versions    []int          `json:"versions"`
		MaxAttempts map[string]int `json:"max_attempts"`
	}
	got := map[string]run{}
	for l := range strings.Lines(string(out)) {
		var r run
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("the script printed %q: %v", l, err)
		}
		got[r.Agent] = r
	}
	t.Logf("python: %s", out)
	if g := got["py-good"]; fmt.Sprint(g.Versions) != "[1 2]" || g.MaxAttempts["1"] != 3 || g.MaxAttempts["2"] < 4 {
		t.Errorf("py-good ran %+v: want versions [1 2], 3 attempts under version 1, 4 under version 2", g)
	}
	if h := got["py-harm"]; fmt.Sprint(h.Versions) != "[1 2 1]" {
		t.Errorf("py-harm ran %+v: want versions [1 2 1] (rolled back)", h)
	}

	for agent, want := range map[string]si.ChangeState{"py-good": si.ChangeConfirmed, "py-harm": si.ChangeRolledBack} {
		var d admin.AgentDetail
		getJSON(t, u+"/api/agents/"+agent, &d)
		if len(d.Changes) != 1 || d.Changes[0].State != want || d.Changes[0].To.MaxAttempts < 4 {
			t.Errorf("%s: changes %+v, want one %s raising max_attempts to 4", agent, d.Changes, want)
		}
		if d.Stats.Calls == 0 {
			t.Errorf("%s: the loop booked no calls", agent)
		}
	}
}

// getJSON GETs url with the token and decodes its 200 answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, v) != nil {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
}
