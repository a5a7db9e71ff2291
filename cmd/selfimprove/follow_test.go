package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// follower is a running events -f.
type follower struct {
	lines chan string
}

// startFollow starts the command and waits until it says it follows.
func startFollow(t *testing.T, args ...string) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
	}()
	f := &follower{lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	select {
	case line := <-ready:
		if !strings.Contains(line, "following") {
			t.Fatalf("events -f: %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events -f did not start following within 10 s")
	}
	return f
}

// want waits at most 1 s for the event of agent of type typ.
func (f *follower) want(t *testing.T, agent string, typ si.EventType, at time.Time) {
	t.Helper()
	deadline := time.After(time.Second)
	for {
		select {
		case line, open := <-f.lines:
			if !open {
				t.Fatal("events -f ended")
			}
			var ev admin.EventView
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("events -f: %v in %q", err, line)
			}
			if ev.AgentID == agent && ev.Type == typ && !ev.Time.Before(at) {
				return
			}
		case <-deadline:
			t.Fatalf("events -f: no %s event of %s within 1 s", typ, agent)
		}
	}
}
