// Package atomicfile writes files so that a reader, or a process started
// after a crash, sees either the old content or the new one, never a part.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces dir/name with data: it writes a temporary file in dir,
// fsyncs it, renames it over dir/name and fsyncs dir. On error the
// temporary file is removed and dir/name is left as it was.
func Write(dir, name string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that a rename or create in it survives a
// crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
