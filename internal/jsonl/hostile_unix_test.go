//go:build unix

package jsonl

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// A pipe at the log or at an archive is never waited on.
func TestPipesAreNotWaitedOn(t *testing.T) {
	t.Run("log", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "events.jsonl")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := Open(fsx.OS{}, dir, "events", 0, 1, time.Now, func(error) {})
			if err == nil {
				l.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, fsx.ErrNotRegular) || !strings.Contains(err.Error(), "events.jsonl: not a regular file (named pipe)") {
				t.Fatalf("Open = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Open waited for the other end of the pipe")
		}
	})
	t.Run("archive", func(t *testing.T) {
		dir := t.TempDir()
		name := "events-20260101T000000.000000000Z-000000.jsonl"
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
		var bg errs
		l, err := Open(fsx.OS{}, dir, "events", 0, 5, time.Now, bg.add)
		if err != nil {
			t.Fatal(err)
		}
		closeWithin(t, l)
		if got := bg.all(); len(got) != 1 || !strings.Contains(got[0].Error(), name+": not a regular file (named pipe)") {
			t.Fatalf("background errors %v, want one naming the pipe", got)
		}
	})
}
