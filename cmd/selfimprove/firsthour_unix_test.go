//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeNoWriteAccess: serve over a directory it may not write says
// to pass --read-only (issue 43, item 3). As root, who writes anywhere,
// serve runs as nobody.
func TestServeNoWriteAccess(t *testing.T) {
	dir, err := os.MkdirTemp("", "selfimprove-ro") // in the system's temp directory, which nobody may enter
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700); os.RemoveAll(dir) })
	writeState(t, dir)
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--dir", dir, "--addr", "127.0.0.1:0")
	if os.Geteuid() == 0 {
		if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if cmd.ProcessState == nil {
			t.Skipf("cannot run serve without write access: %v", err)
		}
		t.Fatalf("serve over a directory it may not write: %v, stderr %q", err, stderr.String())
	}
	msg := stderr.String()
	if ee.ExitCode() != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "permission denied") || !strings.Contains(msg, "--read-only") {
		t.Errorf("serve over a directory it may not write: exit %d, stderr %q, want 1 and a line suggesting --read-only", ee.ExitCode(), msg)
	}
}
