package selfimprove

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/fsx"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"
)

// Files that are not what the loop wrote (links, pipes, huge files) in
// the state directory: they are never followed, waited on or read whole.

var errHostile = errors.New("upstream: 503 service unavailable")

// promptly runs f on its own goroutine and fails the test if it has not
// returned within 5 seconds.
func promptly(t *testing.T, what string, f func()) {
	t.Helper()
	hostileerr.Promptly(t, what, f)
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// hostileOpen opens a Loop on dir with a fake clock and its log in logs.
// It fails the test if New does not return within 5 seconds.
func hostileOpen(t *testing.T, dir string, logs *syncBuffer, opts ...Option) (*Loop, error) {
	t.Helper()
	if logs == nil {
		logs = new(syncBuffer)
	}
	base := []Option{WithDir(dir), WithClock(fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))),
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithNotifier(nil), WithStrategy(nil)}
	var (
		l   *Loop
		err error
	)
	promptly(t, "New", func() { l, err = New(append(base, opts...)...) })
	if err == nil {
		t.Cleanup(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				l.Close()
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("Close did not return within 5s")
			}
		})
	}
	return l, err
}

// mustOpen is hostileOpen for a Loop that must open.
func mustOpen(t *testing.T, dir string, logs *syncBuffer, opts ...Option) *Loop {
	t.Helper()
	l, err := hostileOpen(t, dir, logs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hostileCall runs one call of agent that fails with errHostile, and
// returns its report and fn's config. It fails the test if the call does
// not return within 5 seconds, or does not run fn, or returns another
// error than fn's.
func hostileCall(t *testing.T, l *Loop, agent string) (Report, Config) {
	t.Helper()
	var (
		rep Report
		err error
		cfg Config
		ran bool
	)
	promptly(t, "ExecuteWithImprovement", func() {
		rep, err = l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, c Config) error {
			ran, cfg = true, c
			return errHostile
		})
	})
	if !ran || err != errHostile {
		t.Fatalf("call of %q: fn ran %v, returned %v, want fn's error", agent, ran, err)
	}
	return rep, cfg
}

// closeLoop closes l, failing the test if Close does not return within 5
// seconds.
func closeLoop(t *testing.T, l *Loop) {
	t.Helper()
	promptly(t, "Close", func() { l.Close() })
}

// outsideFile writes content to a file outside any state directory and
// returns its path.
func outsideFile(t *testing.T, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// assertUntouched fails the test unless path still holds content.
func assertUntouched(t *testing.T, path string, content []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the file outside: %v", err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("the file outside the state directory was written: %q, want %q", got, content)
	}
}

// assertRegular fails the test unless path is a regular file (not a link).
func assertRegular(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s is %v, want a regular file", path, fi.Mode())
	}
}

// setAside returns the files of dir whose names start with prefix and
// contain ".corrupt-".
func setAside(t *testing.T, dir, prefix string) []os.FileInfo {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []os.FileInfo
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && strings.Contains(e.Name(), ".corrupt-") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fi)
		}
	}
	return out
}

// learnedDir returns a state directory in which agent "a" runs under
// Route "outside" and the memory remembers errHostile.
func learnedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, dir, nil)
	if err := l.SetConfig("a", Config{Route: "outside"}); err != nil {
		t.Fatal(err)
	}
	hostileCall(t, l, "a")
	closeLoop(t, l)
	return dir
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestHostileEventLogLink(t *testing.T) {
	for _, dangling := range []bool{false, true} {
		t.Run(map[bool]string{false: "to a file", true: "dangling"}[dangling], func(t *testing.T) {
			dir := t.TempDir()
			content := []byte("precious\n")
			outside := outsideFile(t, content)
			if dangling {
				outside = filepath.Join(t.TempDir(), "not-yet")
			}
			if err := os.Symlink(outside, filepath.Join(dir, "events.jsonl")); err != nil {
				t.Fatal(err)
			}
			_, err := hostileOpen(t, dir, nil)
			if err == nil || !strings.Contains(err.Error(), "events.jsonl: not a regular file (symlink)") || !errors.Is(err, fsx.ErrNotRegular) {
				t.Fatalf("New = %v, want an error naming events.jsonl as a symlink", err)
			}
			if dangling {
				if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the link's target was created (%v)", err)
				}
				return
			}
			assertUntouched(t, outside, content)
		})
	}
}

func TestHostileLockFileLink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "not-yet")
	if err := os.Symlink(outside, filepath.Join(dir, ".lock")); err != nil {
		t.Fatal(err)
	}
	_, err := hostileOpen(t, dir, nil)
	if err == nil || !strings.Contains(err.Error(), ".lock: not a regular file (symlink)") {
		t.Fatalf("New = %v, want an error naming .lock as a symlink", err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was created (%v)", err)
	}
}

func TestHostileTraceLogLink(t *testing.T) {
	dir := t.TempDir()
	content := []byte("precious\n")
	outside := outsideFile(t, content)
	if err := os.Symlink(outside, filepath.Join(dir, "traces.jsonl")); err != nil {
		t.Fatal(err)
	}
	logs := new(syncBuffer)
	l := mustOpen(t, dir, logs, WithTraces(TracesBatched))
	for range 3 {
		hostileCall(t, l, "a")
	}
	closeLoop(t, l)
	assertUntouched(t, outside, content)
	if m := l.Metrics(); m.TracesDropped != 3 || m.Traces != 0 {
		t.Errorf("%d traces written, %d dropped; want all 3 dropped", m.Traces, m.TracesDropped)
	}
	if !strings.Contains(logs.String(), "traces.jsonl: not a regular file (symlink)") {
		t.Errorf("the log does not name the trace log as a symlink:\n%s", logs)
	}
}

func TestHostileAgentFileLink(t *testing.T) {
	content := readFile(t, filepath.Join(learnedDir(t), "agents", fileName("a")))
	outside := outsideFile(t, content)
	dir := t.TempDir()
	agents := filepath.Join(dir, "agents")
	if err := os.MkdirAll(agents, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(agents, fileName("a"))); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, nil)
	rep, cfg := hostileCall(t, l, "a")
	if cfg.Route != "" {
		t.Errorf("fn ran under %+v: the state outside the directory was read", cfg)
	}
	if !errors.Is(rep.LoopErr, ErrCorruptState) || !strings.Contains(rep.LoopErr.Error(), "not a regular file (symlink)") {
		t.Errorf("LoopErr = %v, want ErrCorruptState naming a symlink", rep.LoopErr)
	}
	closeLoop(t, l)
	assertUntouched(t, outside, content)
	assertRegular(t, filepath.Join(agents, fileName("a")))
	if aside := setAside(t, agents, fileName("a")); len(aside) != 1 || aside[0].Mode()&os.ModeSymlink == 0 {
		t.Errorf("set aside: %v, want the link", aside)
	}
}

func TestHostileMemoryLink(t *testing.T) {
	content := readFile(t, filepath.Join(learnedDir(t), "memory.json"))
	outside := outsideFile(t, content)
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "memory.json")); err != nil {
		t.Fatal(err)
	}
	logs := new(syncBuffer)
	l := mustOpen(t, dir, logs)
	var got []Memory
	promptly(t, "Similar", func() { got = l.Similar(errHostile.Error(), 1) })
	if len(got) != 0 {
		t.Fatalf("Similar = %+v: the memory outside the directory was read", got)
	}
	if l.Metrics().StoreErrors == 0 || !strings.Contains(logs.String(), "memory.json: not a regular file (symlink)") {
		t.Errorf("the link was not reported:\n%s", logs)
	}
	hostileCall(t, l, "b")
	closeLoop(t, l)
	assertUntouched(t, outside, content)
	assertRegular(t, filepath.Join(dir, "memory.json"))
}

func TestHostileProposalListLink(t *testing.T) {
	content := []byte(`{"format":1,"agents_b64":["` + base64.StdEncoding.EncodeToString([]byte("ghost")) + `"]}`)
	outside := outsideFile(t, content)
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "proposal-agents.json")); err != nil {
		t.Fatal(err)
	}
	logs := new(syncBuffer)
	l := mustOpen(t, dir, logs)
	promptly(t, "Proposals", func() { l.Proposals(nil) })
	if m := l.Metrics(); m.Agents != 0 || m.StoreErrors == 0 {
		t.Errorf("metrics %+v: the list outside the directory was read, or the link not reported", m)
	}
	if !strings.Contains(logs.String(), "proposal-agents.json: not a regular file (symlink)") {
		t.Errorf("the log does not name the link:\n%s", logs)
	}
	hostileCall(t, l, "b")
	closeLoop(t, l)
	assertUntouched(t, outside, content)
}

// A write replaces a link in the directory, never its target.
func TestHostileSaveReplacesLink(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFileStore(dir, FileOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	content := []byte("precious\n")
	for _, path := range []string{filepath.Join(dir, "memory.json"), filepath.Join(dir, "agents", fileName("a"))} {
		outside := outsideFile(t, content)
		if err := os.Symlink(outside, path); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(path, "memory.json") {
			err = st.SaveMeta("memory", []byte(`{"format":1}`))
		} else {
			err = st.SaveAgent("a", []byte(`{"format":1}`))
		}
		if err != nil {
			t.Fatal(err)
		}
		assertUntouched(t, outside, content)
		assertRegular(t, path)
		if got := readFile(t, path); string(got) != `{"format":1}` {
			t.Fatalf("%s = %q", path, got)
		}
	}
}

// sparse makes a sparse file of size bytes at path.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHostileHugeMemory(t *testing.T) {
	dir := t.TempDir()
	const size = 100 << 20
	sparse(t, filepath.Join(dir, "memory.json"), size)
	logs := new(syncBuffer)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := mustOpen(t, dir, logs)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("New allocated %d MiB: the memory was read whole", grew>>20)
	}
	if l.Metrics().StoreErrors == 0 || !strings.Contains(logs.String(), "corrupt") || !strings.Contains(logs.String(), "more than 100663296") {
		t.Errorf("the memory was not read as corrupt, naming the cap:\n%s", logs)
	}
	hostileCall(t, l, "a")
	closeLoop(t, l)
	if aside := setAside(t, dir, "memory.json"); len(aside) != 1 || aside[0].Size() != size {
		t.Fatalf("set aside: %v, want the 100 MiB file", aside)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "memory.json")); err != nil || fi.Size() >= size {
		t.Fatalf("memory.json: %v, %v", fi, err)
	}
}

func TestHostileHugeFiles(t *testing.T) {
	t.Run("agent", func(t *testing.T) {
		dir := t.TempDir()
		agents := filepath.Join(dir, "agents")
		if err := os.MkdirAll(agents, 0o700); err != nil {
			t.Fatal(err)
		}
		sparse(t, filepath.Join(agents, fileName("a")), maxStateFile+1)
		l := mustOpen(t, dir, nil)
		rep, _ := hostileCall(t, l, "a")
		if !errors.Is(rep.LoopErr, ErrCorruptState) || !strings.Contains(rep.LoopErr.Error(), "more than 4194304") {
			t.Errorf("LoopErr = %v, want ErrCorruptState naming the cap", rep.LoopErr)
		}
		closeLoop(t, l)
		if aside := setAside(t, agents, fileName("a")); len(aside) != 1 || aside[0].Size() != maxStateFile+1 {
			t.Fatalf("set aside: %v", aside)
		}
	})
	t.Run("proposal list", func(t *testing.T) {
		dir := t.TempDir()
		sparse(t, filepath.Join(dir, "proposal-agents.json"), maxMetaFile+1)
		logs := new(syncBuffer)
		l := mustOpen(t, dir, logs)
		promptly(t, "Proposals", func() { l.Proposals(nil) })
		if !strings.Contains(logs.String(), "more than 16777216") {
			t.Errorf("the log does not name the cap:\n%s", logs)
		}
		closeLoop(t, l)
		if aside := setAside(t, dir, "proposal-agents.json"); len(aside) != 1 || aside[0].Size() != maxMetaFile+1 {
			t.Fatalf("set aside: %v", aside)
		}
	})
}

// A document the store would refuse to read back is not written.
func TestHostileOversizeSaveRefused(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFileStore(dir, FileOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SaveMeta("proposal-agents", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, maxMetaFile+1)
	if err := st.SaveMeta("proposal-agents", big); err == nil || !strings.Contains(err.Error(), "16777216") {
		t.Fatalf("SaveMeta of %d bytes = %v", len(big), err)
	}
	if got := readFile(t, filepath.Join(dir, "proposal-agents.json")); string(got) != `{}` {
		t.Fatalf("the saved document was replaced by %d bytes", len(got))
	}
	if err := st.SaveAgent("a", make([]byte, maxStateFile+1)); err == nil {
		t.Fatal("SaveAgent wrote a state it would set aside")
	}
}
