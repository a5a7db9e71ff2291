package fsx

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the error of OpenRegular and ReadRegular for
// a name that is not a regular file: a symbolic link (never followed), a
// named pipe, a device, a socket or a directory (never opened).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error of ReadRegular for a file larger than
// its bound.
var ErrTooLarge = errors.New("file too large")

// OpenRegular opens name with flag (os.O_RDONLY, or os.O_WRONLY|
// os.O_APPEND|os.O_CREATE and the like) and perm, only if it is a regular
// file, or does not exist and flag creates it. Anything else fails with
// an error wrapping ErrNotRegular that names the file and what it is
// ("open dir/events.jsonl: not a regular file (symlink)"). It never
// follows a link, at the name or created through it, and never waits for
// the other end of a pipe.
//
// On Unix the file is opened with O_NOFOLLOW and O_NONBLOCK and checked
// through the open descriptor. Elsewhere (Windows has no O_NOFOLLOW) the
// name is checked with Lstat before it is opened, and after: the open file
// must be the regular file found at the name then (os.SameFile).
func OpenRegular(name string, flag int, perm os.FileMode) (*os.File, error) {
	return openRegular(name, flag, perm)
}

// openRegularLstat is OpenRegular without O_NOFOLLOW: Lstat, open, Stat
// the open file, Lstat again, and compare.
func openRegularLstat(name string, flag int, perm os.FileMode) (*os.File, error) {
	fi, err := os.Lstat(name)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return nil, notRegular(name, fi.Mode())
	case err != nil && (flag&os.O_CREATE == 0 || !errors.Is(err, fs.ErrNotExist)):
		return nil, err
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if f, err = checkOpen(f, name); err != nil {
		return nil, err
	}
	// The name may have been replaced between the first Lstat and the
	// open: what is there now must be what was opened.
	open, err := f.Stat()
	if err == nil {
		fi, err = os.Lstat(name)
	}
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = notRegular(name, fi.Mode())
	case !os.SameFile(fi, open):
		err = &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (replaced while it was opened)", ErrNotRegular)}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkOpen returns f if it is a regular file; otherwise it closes it.
func checkOpen(f *os.File, name string) (*os.File, error) {
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(name, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// notRegular is the error for name, of mode m, that is not a regular file.
func notRegular(name string, m fs.FileMode) error {
	return &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(m))}
}

// kind names the type of file m describes.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "irregular file"
}

// ReadRegular returns the content of the regular file name, opened through
// fsys.OpenRegular, if it is at most limit bytes. A larger file fails with
// an error wrapping ErrTooLarge that names the file and limit; it is never
// read whole: the size the open file reports is checked before reading,
// and at most limit+1 bytes are read (a file that grows meanwhile, or
// whose size is not reported, is caught there).
func ReadRegular(fsys FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.OpenRegular(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, tooLarge(name, fi.Size(), limit)
	}
	// One byte more than the size, so that a file that did not change is
	// read without growing the buffer.
	buf := make([]byte, 0, max(fi.Size(), 0)+1)
	r := io.LimitReader(f, limit+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > limit {
		return nil, tooLarge(name, -1, limit)
	}
	return buf, nil
}

// tooLarge is the error for name, of size bytes (-1: unknown), over limit.
func tooLarge(name string, size, limit int64) error {
	if size < 0 {
		return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)}
	}
	return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %d bytes, more than %d bytes", ErrTooLarge, size, limit)}
}
