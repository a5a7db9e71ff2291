package fsx

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// opens are the implementations of OpenRegular: this system's, and the
// one for systems without O_NOFOLLOW, which runs anywhere.
var opens = map[string]func(string, int, os.FileMode) (*os.File, error){
	"OpenRegular":      OpenRegular,
	"openRegularLstat": openRegularLstat,
}

const (
	readOnly = os.O_RDONLY
	appendTo = os.O_WRONLY | os.O_APPEND | os.O_CREATE
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantNotRegular(t *testing.T, err error, path, what string) {
	t.Helper()
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path+": not a regular file ("+what+")") {
		t.Fatalf("err = %v, want %s named as a %s", err, path, what)
	}
}

func TestOpenRegularOpensRegularFiles(t *testing.T) {
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			f, err := open(path, appendTo, 0o600) // created
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("a\n")
			f.Close()
			f, err = open(path, appendTo, 0o600) // appended to
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("b\n")
			f.Close()
			f, err = open(path, readOnly, 0)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			n, _ := f.Read(buf)
			f.Close()
			if got := string(buf[:n]); got != "a\nb\n" {
				t.Fatalf("read %q", got)
			}
			if _, err := open(filepath.Join(dir, "none"), readOnly, 0); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("missing file: %v", err)
			}
		})
	}
}

func TestOpenRegularRefusesLinks(t *testing.T) {
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			dir, out := t.TempDir(), t.TempDir()
			target := filepath.Join(out, "target")
			write(t, target, "precious\n")
			link := filepath.Join(dir, "link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			for _, flag := range []int{readOnly, appendTo, os.O_RDWR | os.O_CREATE} {
				f, err := open(link, flag, 0o600)
				if err == nil {
					f.Close()
				}
				wantNotRegular(t, err, link, "symlink")
			}
			if got, _ := os.ReadFile(target); string(got) != "precious\n" {
				t.Fatalf("target = %q", got)
			}
			// A dangling link: its target is not created.
			dangling := filepath.Join(dir, "dangling")
			if err := os.Symlink(filepath.Join(out, "new"), dangling); err != nil {
				t.Fatal(err)
			}
			_, err := open(dangling, appendTo, 0o600)
			wantNotRegular(t, err, dangling, "symlink")
			if _, err := os.Lstat(filepath.Join(out, "new")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the link's target was created (%v)", err)
			}
			// A directory.
			_, err = open(out, readOnly, 0)
			wantNotRegular(t, err, out, "directory")
			_, err = open(out, appendTo, 0o600)
			wantNotRegular(t, err, out, "directory")
		})
	}
}

// lyingFS reports every file as empty, as some special files do.
type lyingFS struct{ OS }

type lyingFile struct{ File }

type emptyInfo struct{ os.FileInfo }

func (emptyInfo) Size() int64 { return 0 }

func (f lyingFile) Stat() (os.FileInfo, error) {
	fi, err := f.File.Stat()
	return emptyInfo{fi}, err
}

func (l lyingFS) OpenRegular(n string, flag int, perm os.FileMode) (File, error) {
	f, err := l.OS.OpenRegular(n, flag, perm)
	if err != nil {
		return nil, err
	}
	return lyingFile{f}, nil
}

func TestReadRegularBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	write(t, path, "0123456789")
	for _, fsys := range []FS{OS{}, lyingFS{}} {
		if got, err := ReadRegular(fsys, path, 10); err != nil || string(got) != "0123456789" {
			t.Fatalf("%T, at the bound: %q, %v", fsys, got, err)
		}
		got, err := ReadRegular(fsys, path, 9)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "more than 9 bytes") || got != nil {
			t.Fatalf("%T, over the bound: %q, %v", fsys, got, err)
		}
	}
	empty := filepath.Join(dir, "empty")
	write(t, empty, "")
	if got, err := ReadRegular(OS{}, empty, 0); err != nil || len(got) != 0 {
		t.Fatalf("empty file: %q, %v", got, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	_, err := ReadRegular(OS{}, link, 100)
	wantNotRegular(t, err, link, "symlink")
}

// A file far over the bound is not read.
func TestReadRegularHugeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = ReadRegular(OS{}, path, 1<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1073741824 bytes, more than 1048576 bytes") {
		t.Fatalf("err = %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes", grew)
	}
}

func TestFaultyFailsReadsOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	write(t, path, "x")
	ffs := NewFaulty(OS{})
	ffs.Fail(OpRead, nil, nil)
	if _, err := ReadRegular(ffs, path, 10); !IsNoSpace(err) {
		t.Fatalf("read: %v", err)
	}
	f, err := ffs.OpenRegular(path, appendTo, 0o600)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	f.Close()
}
