//go:build unix

package selfimprove

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// mkfifo makes a named pipe at path that nothing ever opens the other end
// of: opening it for reading or writing would wait forever.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHostilePipes(t *testing.T) {
	t.Run("events.jsonl", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, "events.jsonl"))
		_, err := hostileOpen(t, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "events.jsonl: not a regular file (named pipe)") {
			t.Fatalf("New = %v, want an error naming events.jsonl as a pipe", err)
		}
	})
	t.Run(".lock", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, ".lock"))
		_, err := hostileOpen(t, dir, nil)
		if err == nil || !strings.Contains(err.Error(), ".lock: not a regular file (named pipe)") {
			t.Fatalf("New = %v, want an error naming .lock as a pipe", err)
		}
	})
	t.Run("traces.jsonl", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, "traces.jsonl"))
		l := mustOpen(t, dir, nil, WithTraces(TracesSync))
		rep, _ := hostileCall(t, l, "a")
		if !errors.Is(rep.LoopErr, ErrTraceDropped) || !strings.Contains(rep.LoopErr.Error(), "traces.jsonl: not a regular file (named pipe)") {
			t.Errorf("LoopErr = %v, want the trace dropped, naming the pipe", rep.LoopErr)
		}
		closeLoop(t, l)
	})
	t.Run("agent", func(t *testing.T) {
		dir := t.TempDir()
		agents := filepath.Join(dir, "agents")
		if err := os.MkdirAll(agents, 0o700); err != nil {
			t.Fatal(err)
		}
		mkfifo(t, filepath.Join(agents, fileName("a")))
		l := mustOpen(t, dir, nil)
		rep, _ := hostileCall(t, l, "a")
		if !errors.Is(rep.LoopErr, ErrCorruptState) || !strings.Contains(rep.LoopErr.Error(), "not a regular file (named pipe)") {
			t.Errorf("LoopErr = %v, want ErrCorruptState naming a pipe", rep.LoopErr)
		}
		closeLoop(t, l)
		assertRegular(t, filepath.Join(agents, fileName("a")))
		if aside := setAside(t, agents, fileName("a")); len(aside) != 1 || aside[0].Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("set aside: %v, want the pipe", aside)
		}
	})
	t.Run("memory.json", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, "memory.json"))
		logs := new(syncBuffer)
		l := mustOpen(t, dir, logs)
		promptly(t, "Similar", func() { l.Similar(errHostile.Error(), 1) })
		if !strings.Contains(logs.String(), "memory.json: not a regular file (named pipe)") {
			t.Errorf("the log does not name the pipe:\n%s", logs)
		}
		hostileCall(t, l, "a")
		closeLoop(t, l)
		assertRegular(t, filepath.Join(dir, "memory.json"))
	})
	t.Run("proposal-agents.json", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, "proposal-agents.json"))
		logs := new(syncBuffer)
		l := mustOpen(t, dir, logs)
		promptly(t, "Proposals", func() { l.Proposals(nil) })
		if !strings.Contains(logs.String(), "proposal-agents.json: not a regular file (named pipe)") {
			t.Errorf("the log does not name the pipe:\n%s", logs)
		}
		hostileCall(t, l, "a")
		closeLoop(t, l)
	})
}
