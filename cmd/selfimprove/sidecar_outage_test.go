package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a strings.Builder safe for a process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSidecarPythonOutage kills the sidecar in the middle of a Python
// agent's run and starts it again on the same port and state directory
// (issue 42, finding 1). The agent makes 40 calls with it up (flushed), 40
// with it killed, with max_queue 30: every call returns its answer, under
// the config the client last read; the client says it is offline, keeps
// the 30 newest reports and counts the 10 oldest dropped, as
// docs/intake.md says. Once the sidecar is back, a flush delivers the 30,
// and the restarted sidecar books them.
// phases returns a reader of the phases sidecar_checks.py prints on
// stdout, one JSON line each, that fails the test on any other line.
func phases(t *testing.T, stdout io.Reader, errOut *lockedBuffer) func(name string) map[string]any {
	br := bufio.NewReader(stdout)
	return func(name string) map[string]any {
		t.Helper()
		line, err := br.ReadString('\n')
		var m map[string]any
		if err != nil || json.Unmarshal([]byte(line), &m) != nil || m["phase"] != name {
			t.Fatalf("phase %s: read %q %v; stderr:\n%s", name, line, err, errOut.String())
		}
		t.Logf("%s", strings.TrimSpace(line))
		return m
	}
}

func TestSidecarPythonOutage(t *testing.T) {
	python3(t)
	dir := filepath.Join(t.TempDir(), "state")
	s := startSidecar(t, dir, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const calls, maxQueue = 40, 30
	cmd := pythonCmd(ctx, t, "sidecar_checks.py", "outage", "--url", s.url, "--agent", "py-outage",
		"--calls", fmt.Sprint(calls), "--max-queue", fmt.Sprint(maxQueue))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	errOut := &lockedBuffer{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			stdin.Close()
			cmd.Wait()
		}
	}()
	phase := phases(t, stdout, errOut)
	up := phase("up")
	if num(up, "answers") != calls || num(up, "booked") != calls || num(up, "pending") != 0 {
		t.Fatalf("with the sidecar up: %v", up)
	}
	booked := agentDetail(t, s, "py-outage").Stats.Calls
	addr := s.addr(t)
	s.kill()
	stdin.Write([]byte("go\n"))

	down := phase("down")
	if num(down, "answers") != calls {
		t.Errorf("with the sidecar down, %d answers of %d calls came back", num(down, "answers"), calls)
	}
	if down["offline"] != true || num(down, "outages") != 1 {
		t.Errorf("the client does not say it is offline: %v", down)
	}
	if num(down, "pending") != maxQueue || num(down, "dropped") != calls-maxQueue {
		t.Errorf("with the sidecar down: %v, want %d queued and %d dropped", down, maxQueue, calls-maxQueue)
	}
	if vs, want := fmt.Sprint(down["versions"]), fmt.Sprintf("[%d]", num(up, "last_version")); vs != want {
		t.Errorf("the calls ran under versions %s, want the last one read, %s", vs, want)
	}

	s2 := startSidecar(t, dir, addr)
	stdin.Write([]byte("go\n"))
	back := phase("back")
	if back["offline"] != false || num(back, "pending") != 0 || num(back, "booked") != calls+maxQueue ||
		num(back, "dropped") != calls-maxQueue {
		t.Errorf("once the sidecar is back: %v, want %d booked, none queued, %d dropped", back, calls+maxQueue, calls-maxQueue)
	}
	stdin.Close()
	waited = true
	if err := cmd.Wait(); err != nil {
		t.Errorf("python3: %v\n%s", err, errOut.String())
	}
	if n := strings.Count(errOut.String(), "is unavailable"); n != 1 {
		t.Errorf("want one warning of the outage, got %d:\n%s", n, errOut.String())
	}
	// The restarted sidecar booked the 30 delivered, over what it had kept
	// of the first run's.
	if after := agentDetail(t, s2, "py-outage").Stats.Calls; after < maxQueue || after > booked+maxQueue {
		t.Errorf("the restarted sidecar counts %d calls: want %d delivered after the restart (the first one counted %d)",
			after, maxQueue, booked)
	} else {
		t.Logf("the restarted sidecar counts %d calls (the killed one had %d; %d delivered after the restart)", after, booked, maxQueue)
	}
}

// TestSidecarPythonDecision runs an agent whose every call fails (503)
// through the real sidecar with the client's defaults (batch_size 50):
// the loop changes its config on the report of call k (the change's
// Before.Calls), and the test counts the calls after it that still ran
// under the old version (issue 42, finding 16: 25 of 50 did, as the
// reports waited for a batch of 50). A failure's report goes out before
// the next call reads its config: at most 1.
func TestSidecarPythonDecision(t *testing.T) {
	python3(t)
	s := startSidecar(t, filepath.Join(t.TempDir(), "state"), "127.0.0.1:0")
	lines := runPython(t, "sidecar_checks.py", "decision", "--url", s.url, "--agent", "py-failing", "--calls", "60")
	late, decidedAt := lateCalls(t, s, "py-failing", lines)
	t.Logf("the loop decided on call %d; %d failing calls ran under the old config after it", decidedAt, late)
	if late > 1 {
		t.Errorf("%d calls ran under the old config after the loop decided: want at most 1", late)
	}
}

// lateCalls returns how many calls of agent ran under the config its
// first change replaced after the loop made it (before the agent ran the
// new one), and the call it was made
// on. lines is sidecar_checks.py decision's output.
func lateCalls(t *testing.T, s *sidecar, agent string, lines []map[string]any) (late, decidedAt int) {
	t.Helper()
	d := agentDetail(t, s, agent)
	if len(lines) != 1 || len(d.Changes) == 0 {
		t.Fatalf("printed %v; changes %+v: want one line and a change", lines, d.Changes)
	}
	c := d.Changes[0]
	versions, _ := lines[0]["versions"].([]any)
	decidedAt = c.Before.Calls // calls booked when it was made: the last was its trigger
	// The calls after it still under the old version, up to the first
	// under the new one (a rollback puts the agent back on the old).
	for i := decidedAt; i < len(versions); i++ {
		if v, _ := versions[i].(float64); int(v) != c.From.Version {
			break
		}
		late++
	}
	return late, decidedAt
}
