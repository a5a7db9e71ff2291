package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/admin"
)

// pyDir is the Python client's directory.
var pyDir = filepath.Join("..", "..", "clients", "python")

// sidecar is a `selfimprove serve --create` process for the Python
// client's tests.
type sidecar struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed once its stderr is read to the end
}

// startSidecar starts serve over dir on addr ("127.0.0.1:0": a free
// port) and returns it once it listens. It is killed at the test's end.
func startSidecar(t *testing.T, dir, addr string) *sidecar {
	t.Helper()
	s := &sidecar{cmd: exec.Command(bin, "serve", "--dir", dir, "--create", "--addr", addr, "--intake-agent", "py-*"), done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token, "SELFIMPROVE_INTAKE_TOKEN="+intakeToken)
	stderr, _ := s.cmd.StderrPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	i := strings.Index(line, "http://")
	if err != nil || i < 0 {
		t.Fatalf("serve: %q %v", line, err)
	}
	s.url = strings.TrimSuffix(strings.Fields(line[i:])[0], "/")
	go func() {
		defer close(s.done)
		io.Copy(io.Discard, br)
	}()
	return s
}

// kill kills the process, as a crash would, and waits for it.
func (s *sidecar) kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd.Wait()
}

// addr returns the host:port it listens on.
func (s *sidecar) addr(t *testing.T) string {
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// intakeToken is the agents' token of the sidecars the tests start, as
// docs/intake.md's recipe gives it: it reports for the agents "py-*"
// only.
const intakeToken = "intake-token-value"

// pythonCmd returns python3 running a script of clients/python with args,
// the intake token (never the operator's) in its environment.
func pythonCmd(ctx context.Context, t *testing.T, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, python3(t), append([]string{filepath.Join(pyDir, script)}, args...)...)
	cmd.Env = append(os.Environ(), "SELFIMPROVE_INTAKE_TOKEN="+intakeToken, "PYTHONDONTWRITEBYTECODE=1")
	return cmd
}

// runPython runs a script of clients/python and returns its stdout's JSON
// lines, decoded into maps.
func runPython(t *testing.T, script string, args ...string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := pythonCmd(ctx, t, script, args...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s %v: %v\n%s%s", script, args, err, out, errOut.String())
	}
	var lines []map[string]any
	for l := range strings.Lines(string(out)) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s printed %q: %v", script, l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// agentDetail reads an agent's detail from the sidecar.
func agentDetail(t *testing.T, s *sidecar, agent string) admin.AgentDetail {
	t.Helper()
	var d admin.AgentDetail
	getJSON(t, s.url+"/api/agents/"+url.PathEscape(agent), &d)
	return d
}

// num returns m[key] as an int (JSON numbers decode as float64).
func num(m map[string]any, key string) int {
	f, _ := m[key].(float64)
	return int(f)
}

// TestPythonClientUnit runs the Python client's unit tests
// (clients/python/test_selfimprove_client.py: fake intakes on
// http.server) with the real python3: answers never lost with the intake
// down or refusing (issue 42, finding 1), texts cut in UTF-8 bytes and a
// bad entry dropped alone (6), no token on a redirect to another origin
// (11), Retry-After capped (12), quality and cost measured on the answer
// (13), a failure's report sent before the next call (16).
func TestPythonClientUnit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(t), "-m", "unittest", "-v", "test_selfimprove_client")
	cmd.Dir = pyDir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python3 -m unittest did not pass:\n%s", out)
	}
}

// TestSidecarPythonTexts reports through the real sidecar three failures
// whose errors are 3,000 non-ASCII characters (7,000 bytes): the client
// cuts them to 4,096 bytes, and all three are booked (issue 42, finding
// 6: none were). A batch with one report the intake refuses (a version
// the agent never had) books the three others, and counts one dropped.
func TestSidecarPythonTexts(t *testing.T) {
	python3(t)
	s := startSidecar(t, filepath.Join(t.TempDir(), "state"), "127.0.0.1:0")
	lines := runPython(t, "sidecar_checks.py", "texts", "--url", s.url)
	if len(lines) != 2 {
		t.Fatalf("printed %v", lines)
	}
	if l := lines[0]; num(l, "booked") != 3 || num(l, "dropped") != 0 || num(l, "pending") != 0 {
		t.Errorf("long errors: %v, want 3 booked, none dropped", l)
	}
	if l := lines[1]; num(l, "booked") != 6 || num(l, "dropped") != 1 || num(l, "pending") != 0 {
		t.Errorf("a bad entry: %v, want 3 more booked, 1 dropped", l)
	}
	if d := agentDetail(t, s, "py-texts"); d.Stats.Calls != 3 || d.Stats.Failures != 3 {
		t.Errorf("py-texts: the loop booked %d calls, %d failures: want 3 and 3", d.Stats.Calls, d.Stats.Failures)
	}
	if d := agentDetail(t, s, "py-bad-entry"); d.Stats.Calls != 3 {
		t.Errorf("py-bad-entry: the loop booked %d calls: want the 3 good ones", d.Stats.Calls)
	}
}
