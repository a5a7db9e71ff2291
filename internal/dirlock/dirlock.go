// Package dirlock takes an advisory, exclusive lock on a directory, so that
// one process at a time owns it. The lock goes with the process: the kernel
// releases it when the process dies, however it dies.
package dirlock

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// ErrLocked is returned when another owner holds the lock.
var ErrLocked = errors.New("dirlock: directory is locked by another owner")

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire locks dir (creating dir/name as the lock file) without waiting.
// It fails with an error wrapping ErrLocked when another Lock, in this
// process or another, holds it, and with one wrapping fsx.ErrNotRegular
// when dir/name is not a regular file: a link there is not followed (nor
// its target created), a pipe not waited on.
func Acquire(dir, name string) (*Lock, error) {
	f, err := fsx.OpenRegular(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// Release releases the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
