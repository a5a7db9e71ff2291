package jsonl

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// errs collects the errors of background work.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, err)
}

func (e *errs) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.list...)
}

// closeWithin closes l, failing the test if Close waits more than 5s.
func closeWithin(t *testing.T, l *Log) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Close()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
}

func outside(t *testing.T) (string, []byte) {
	t.Helper()
	content := []byte("{\"precious\":true}\n")
	p := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, content
}

func untouched(t *testing.T, path string, content []byte) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || string(got) != string(content) {
		t.Fatalf("the file outside: %q, %v", got, err)
	}
}

func TestOpenRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target, content := outside(t)
	path := filepath.Join(dir, "events.jsonl")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, err := Open(fsx.OS{}, dir, "events", 0, 1, time.Now, func(error) {})
	if !errors.Is(err, fsx.ErrNotRegular) || !strings.Contains(err.Error(), path+": not a regular file (symlink)") {
		t.Fatalf("Open = %v", err)
	}
	untouched(t, target, content)
}

// An archive waiting to be compressed that is a link is not read: its
// target would end up, compressed, in the directory.
func TestArchiveLinkIsNotCompressed(t *testing.T) {
	dir := t.TempDir()
	target, content := outside(t)
	name := "events-20260101T000000.000000000Z-000000.jsonl"
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	var bg errs
	l, err := Open(fsx.OS{}, dir, "events", 0, 5, time.Now, bg.add)
	if err != nil {
		t.Fatal(err)
	}
	closeWithin(t, l)
	untouched(t, target, content)
	if _, err := os.Lstat(filepath.Join(dir, name+".gz")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the link's target was compressed into the directory (%v)", err)
	}
	got := bg.all()
	if len(got) != 1 || !errors.Is(got[0], fsx.ErrNotRegular) || !strings.Contains(got[0].Error(), name+": not a regular file (symlink)") {
		t.Fatalf("background errors %v, want one naming the link", got)
	}
}

// Pruning removes links, not their targets.
func TestPruneRemovesLinksOnly(t *testing.T) {
	dir := t.TempDir()
	var targets []string
	var content []byte
	for i := range 3 {
		var target string
		target, content = outside(t)
		targets = append(targets, target)
		name := "events-2026010" + string(rune('1'+i)) + "T000000.000000000Z-000000.jsonl.gz"
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	var bg errs
	l, err := Open(fsx.OS{}, dir, "events", 0, 1, time.Now, bg.add)
	if err != nil {
		t.Fatal(err)
	}
	closeWithin(t, l)
	if got := bg.all(); len(got) != 0 {
		t.Fatal(got)
	}
	arch, err := Archives(fsx.OS{}, dir, "events")
	if err != nil || len(arch) != 1 {
		t.Fatalf("archives %v, %v: want the newest", arch, err)
	}
	for _, target := range targets {
		untouched(t, target, content)
	}
}
