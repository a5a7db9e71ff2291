//go:build unix

package fsx

import (
	"os"
	"syscall"
)

// openRegular opens with O_NOFOLLOW, so that a link at the name fails the
// open (ELOOP on Linux, EMLINK or EFTYPE on some BSDs), even with O_CREATE;
// and with O_NONBLOCK, so that a pipe opens at once (or fails, ENXIO,
// without a reader) instead of waiting for the other end. The type is
// then checked on the open descriptor. O_NONBLOCK does nothing to a
// regular file.
func openRegular(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		// Name what is there rather than report ELOOP, ENXIO or EISDIR.
		if fi, lerr := os.Lstat(name); lerr == nil && !fi.Mode().IsRegular() {
			return nil, notRegular(name, fi.Mode())
		}
		return nil, err
	}
	return checkOpen(f, name)
}
