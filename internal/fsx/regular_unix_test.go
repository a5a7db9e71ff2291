//go:build unix

package fsx

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Opening a pipe that nothing opens the other end of returns at once.
func TestOpenRegularRefusesPipes(t *testing.T) {
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fifo")
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, flag := range []int{readOnly, appendTo, os.O_RDWR} {
				done := make(chan error, 1)
				go func() {
					f, err := open(path, flag, 0o600)
					if err == nil {
						f.Close()
					}
					done <- err
				}()
				select {
				case err := <-done:
					wantNotRegular(t, err, path, "named pipe")
				case <-time.After(5 * time.Second):
					t.Fatalf("open with flag %#x waited for the other end of the pipe", flag)
				}
			}
		})
	}
}
