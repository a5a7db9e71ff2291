// Package jsonl reads and appends JSON-lines files: a reader that skips and
// counts what it cannot use, and an append-only log with fsync, size-based
// rotation into gzip archives, and a bounded number of archives.
package jsonl

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// Read calls fn with each line of r that is complete (ends in a newline),
// at most maxLine bytes long and valid JSON. It returns how many lines it
// skipped: a torn last line, lines that are not JSON, and over-long lines.
// An error from fn or from r stops it.
func Read(r io.Reader, maxLine int, fn func(line []byte) error) (skipped int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var long bool // inside an over-long line
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !long && len(buf)+len(chunk) <= maxLine {
				buf = append(buf, chunk...)
			} else {
				long, buf = true, buf[:0]
			}
			continue
		case errors.Is(err, io.EOF):
			if len(buf)+len(chunk) > 0 || long {
				skipped++ // torn last line
			}
			return skipped, nil
		case err != nil:
			return skipped, err
		}
		line := chunk
		if len(buf) > 0 {
			buf = append(buf, chunk...)
			line = buf
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		switch {
		case long || len(line) > maxLine:
			skipped++
		case len(bytes.TrimSpace(line)) == 0:
		case !json.Valid(line):
			skipped++
		default:
			if err := fn(line); err != nil {
				return skipped, err
			}
		}
		long, buf = false, buf[:0]
	}
}

// Log is an append-only JSON-lines file, dir/name+".jsonl". Each Append is
// written and fsynced before it returns. When the file reaches MaxSize it
// is renamed to an archive, name+"-<UTC time>-<seq>.jsonl", which a background
// goroutine gzips; only the newest Keep archives are kept.
type Log struct {
	fs      fsx.FS
	dir     string
	name    string
	maxSize int64
	keep    int
	now     func() time.Time
	onErr   func(error) // background failures

	mu     sync.Mutex
	f      fsx.File
	size   int64
	torn   bool // a failed write may have left a partial line
	closed bool

	bg   sync.WaitGroup
	bgMu sync.Mutex // one archive compressed or pruned at a time
}

// Open opens (creating) dir/name.jsonl for appending. maxSize <= 0 turns
// rotation off; keep is the number of archives kept (at least 1). It fails
// with an error wrapping fsx.ErrNotRegular, naming the file, when
// dir/name.jsonl is not a regular file (a link is never followed, a pipe
// never waited on).
func Open(fs fsx.FS, dir, name string, maxSize int64, keep int, now func() time.Time, onErr func(error)) (*Log, error) {
	l := &Log{fs: fs, dir: dir, name: name, maxSize: maxSize, keep: max(keep, 1), now: now, onErr: onErr}
	if err := l.open(); err != nil {
		return nil, err
	}
	l.maintainInBackground()
	return l, nil
}

func (l *Log) path() string { return filepath.Join(l.dir, l.name+".jsonl") }

// open opens the log's file for appending, creating it. Only a regular
// file is opened: a link there is not followed and a pipe not waited on,
// and the error (wrapping fsx.ErrNotRegular) names the file.
func (l *Log) open() error {
	f, err := l.fs.OpenRegular(l.path(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	// A crash may have left a partial last line: end it, so that the next
	// line starts clean.
	l.torn = l.size > 0
	return nil
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("jsonl: log closed")

// Append writes data (whole lines, each ending in a newline) and fsyncs
// it. On a failed write it removes what it wrote, so that no partial line
// is left behind; if it cannot, the next Append starts on a new line.
func (l *Log) Append(data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.torn {
		if err := l.write([]byte("\n")); err != nil {
			return err
		}
		l.torn = false
	}
	if err := l.write(data); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	if l.maxSize > 0 && l.size >= l.maxSize {
		if err := l.rotate(); err != nil {
			l.onErr(fmt.Errorf("jsonl: rotate %s: %w", l.name, err))
		}
	}
	return nil
}

// write writes p in full or, on failure, undoes it.
func (l *Log) write(p []byte) error {
	n, err := l.f.Write(p)
	if err == nil {
		l.size += int64(n)
		return nil
	}
	if n > 0 {
		if t, ok := l.f.(interface{ Truncate(int64) error }); !ok || t.Truncate(l.size) != nil {
			l.torn = true
		}
	}
	return err
}

// rotate moves the current file to an archive and starts a new one. It
// costs a rename; compression and pruning run in the background.
func (l *Log) rotate() error {
	// The time alone may repeat (a coarse or fake clock): a sequence
	// number makes the name free, and keeps names sorting by age.
	stamp := l.now().UTC().Format("20060102T150405.000000000Z")
	var archive string
	for seq := 0; ; seq++ {
		archive = filepath.Join(l.dir, fmt.Sprintf("%s-%s-%06d.jsonl", l.name, stamp, seq))
		if !l.exists(archive) && !l.exists(archive+".gz") {
			break
		}
	}
	if err := l.f.Close(); err != nil {
		l.f = nil
		return err
	}
	l.f = nil
	if err := l.fs.Rename(l.path(), archive); err != nil {
		return err
	}
	if err := l.open(); err != nil {
		return err
	}
	l.torn = false
	if err := l.fs.SyncDir(l.dir); err != nil {
		return err
	}
	l.maintainInBackground()
	return nil
}

// maintainInBackground runs maintain on its own goroutine.
func (l *Log) maintainInBackground() {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		l.maintain()
	}()
}

// maintain prunes the archives beyond keep, then compresses the archives
// left uncompressed, oldest first. It is idempotent, runs one at a time,
// and finishes the work of a run that a crash interrupted.
func (l *Log) maintain() {
	l.bgMu.Lock()
	defer l.bgMu.Unlock()
	if err := l.prune(); err != nil {
		l.onErr(fmt.Errorf("jsonl: prune %s archives: %w", l.name, err))
	}
	arch, err := Archives(l.fs, l.dir, l.name)
	if err != nil {
		l.onErr(fmt.Errorf("jsonl: list %s archives: %w", l.name, err))
		return
	}
	have := map[string]bool{}
	for _, a := range arch {
		have[a] = true
	}
	for _, a := range arch {
		if !strings.HasSuffix(a, ".jsonl") {
			continue
		}
		path := filepath.Join(l.dir, a)
		if have[a+".gz"] {
			// Compressed before a crash, not yet removed.
			err = l.fs.Remove(path)
		} else {
			err = l.compress(path)
		}
		if err != nil {
			l.onErr(fmt.Errorf("jsonl: compress %s: %w", a, err))
		}
	}
}

// exists reports whether there is anything at path, a dangling link
// included.
func (l *Log) exists(path string) bool {
	_, err := l.fs.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// compress replaces archive with archive+".gz" (temp file, fsync, rename),
// streaming, at gzip's fastest level: an archive is compressed while the
// log keeps being written, and must not starve the writer. An archive that
// is not a regular file (a link, a pipe) is left as it is, and the error
// names it.
func (l *Log) compress(archive string) error {
	src, err := l.fs.OpenRegular(archive, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	err = fsx.WriteAtomicFrom(l.fs, l.dir, filepath.Base(archive)+".gz", func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return err
		}
		if _, err := io.Copy(zw, src); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return err
	}
	return l.fs.Remove(archive)
}

// Archives lists dir's archives of the log called name, oldest first.
func Archives(fs fsx.FS, dir, name string) ([]string, error) {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, name+"-") && (strings.HasSuffix(n, ".jsonl.gz") || strings.HasSuffix(n, ".jsonl")) {
			out = append(out, n)
		}
	}
	slices.Sort(out) // the UTC time in the name sorts by age
	return out, nil
}

// prune removes the oldest archives beyond keep.
func (l *Log) prune() error {
	arch, err := Archives(l.fs, l.dir, l.name)
	if err != nil {
		return err
	}
	// An archive being compressed appears twice (.jsonl and .jsonl.gz):
	// count each once.
	seen := map[string]bool{}
	var uniq []string
	for _, a := range arch {
		base := strings.TrimSuffix(a, ".gz")
		if !seen[base] {
			seen[base] = true
			uniq = append(uniq, base)
		}
	}
	var errs []error
	for _, base := range uniq[:max(len(uniq)-l.keep, 0)] {
		for _, n := range []string{base, base + ".gz"} {
			if err := l.fs.Remove(filepath.Join(l.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Close waits for background compression and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var err error
	if l.f != nil {
		err = l.f.Close()
	}
	l.mu.Unlock()
	l.bg.Wait()
	return err
}
