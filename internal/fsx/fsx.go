// Package fsx is the file-system seam of the file store: the handful of
// operations it performs, so that tests can make any of them fail.
package fsx

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// File is an open file.
type File interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Sync() error
	Close() error
	Name() string
}

// FS is the set of operations the file store performs. Files are opened
// only through OpenRegular: whatever is at a name, a link is never
// followed and a pipe or device never opened.
type FS interface {
	MkdirAll(path string, perm os.FileMode) error
	// OpenRegular opens the regular file name (see the package function).
	OpenRegular(name string, flag int, perm os.FileMode) (File, error)
	CreateTemp(dir, pattern string) (File, error)
	ReadDir(name string) ([]os.DirEntry, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// Lstat describes name itself, not what a link there points to.
	Lstat(name string) (os.FileInfo, error)
	SyncDir(dir string) error
}

// OS is the real file system.
type OS struct{}

func (OS) MkdirAll(p string, perm os.FileMode) error { return os.MkdirAll(p, perm) }
func (OS) OpenRegular(n string, flag int, perm os.FileMode) (File, error) {
	f, err := OpenRegular(n, flag, perm)
	if err != nil {
		return nil, err // not a nil *os.File in a non-nil File
	}
	return f, nil
}
func (OS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }
func (OS) ReadDir(n string) ([]os.DirEntry, error)      { return os.ReadDir(n) }
func (OS) Rename(o, n string) error                     { return os.Rename(o, n) }
func (OS) Remove(n string) error                        { return os.Remove(n) }
func (OS) Lstat(n string) (os.FileInfo, error)          { return os.Lstat(n) }

// SyncDir fsyncs a directory so that a create, rename or remove in it
// survives a crash.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Op names an operation that Faulty can fail.
type Op string

// The operations.
const (
	OpCreate  Op = "create" // OpenRegular with O_CREATE, CreateTemp
	OpWrite   Op = "write"
	OpSync    Op = "sync" // File.Sync and SyncDir
	OpRename  Op = "rename"
	OpRead    Op = "read" // OpenRegular for reading only
	OpRemove  Op = "remove"
	OpMkdir   Op = "mkdir"
	OpPartial Op = "partial" // a write that writes half its bytes, then fails
)

// ErrNoSpace is the disk-full error Faulty returns by default.
var ErrNoSpace = &fs.PathError{Op: "write", Path: "(injected)", Err: syscall.ENOSPC}

// Faulty wraps an FS and fails chosen operations on paths that match.
type Faulty struct {
	FS
	mu    sync.Mutex
	fail  map[Op]error
	match func(path string) bool
	count map[Op]int
}

// NewFaulty wraps base. Nothing fails until Fail is called.
func NewFaulty(base FS) *Faulty {
	return &Faulty{FS: base, fail: map[Op]error{}, count: map[Op]int{}}
}

// Fail makes op fail with err (ErrNoSpace when nil) on the paths match
// accepts (all paths when match is nil), until Heal.
func (f *Faulty) Fail(op Op, err error, match func(path string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		err = ErrNoSpace
	}
	f.fail[op] = err
	f.match = match
}

// Heal stops all failures.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.fail)
}

// Injected returns how many times op was failed.
func (f *Faulty) Injected(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[op]
}

func (f *Faulty) check(op Op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err, ok := f.fail[op]
	if !ok || (f.match != nil && !f.match(path)) {
		return nil
	}
	f.count[op]++
	return err
}

func (f *Faulty) MkdirAll(p string, perm os.FileMode) error {
	if err := f.check(OpMkdir, p); err != nil {
		return err
	}
	return f.FS.MkdirAll(p, perm)
}

func (f *Faulty) OpenRegular(n string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 {
		if err := f.check(OpCreate, n); err != nil {
			return nil, err
		}
	}
	if flag&(os.O_RDONLY|os.O_WRONLY|os.O_RDWR) == os.O_RDONLY {
		if err := f.check(OpRead, n); err != nil {
			return nil, err
		}
	}
	file, err := f.FS.OpenRegular(n, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, f: f}, nil
}

func (f *Faulty) CreateTemp(dir, pattern string) (File, error) {
	if err := f.check(OpCreate, dir); err != nil {
		return nil, err
	}
	file, err := f.FS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, f: f}, nil
}

func (f *Faulty) Rename(o, n string) error {
	if err := f.check(OpRename, n); err != nil {
		return err
	}
	return f.FS.Rename(o, n)
}

func (f *Faulty) Remove(n string) error {
	if err := f.check(OpRemove, n); err != nil {
		return err
	}
	return f.FS.Remove(n)
}

func (f *Faulty) SyncDir(dir string) error {
	if err := f.check(OpSync, dir); err != nil {
		return err
	}
	return f.FS.SyncDir(dir)
}

type faultyFile struct {
	File
	f *Faulty
}

func (w *faultyFile) Write(p []byte) (int, error) {
	if err := w.f.check(OpPartial, w.Name()); err != nil {
		n, _ := w.File.Write(p[:len(p)/2])
		return n, err
	}
	if err := w.f.check(OpWrite, w.Name()); err != nil {
		return 0, err
	}
	return w.File.Write(p)
}

func (w *faultyFile) Sync() error {
	if err := w.f.check(OpSync, w.Name()); err != nil {
		return err
	}
	return w.File.Sync()
}

// IsNoSpace reports whether err is a disk-full error.
func IsNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// WriteAtomic replaces dir/name with data: a temporary file in dir,
// fsynced, renamed over dir/name, and dir fsynced. On error the temporary
// file is removed and dir/name is left as it was.
func WriteAtomic(fs FS, dir, name string, data []byte) error {
	return WriteAtomicFrom(fs, dir, name, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteAtomicFrom is WriteAtomic with the content written by fill.
func WriteAtomicFrom(fs FS, dir, name string, fill func(w io.Writer) error) (err error) {
	f, err := fs.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			fs.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = fs.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}
