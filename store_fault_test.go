package selfimprove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

var errFn = errors.New("fn failed")

// TestStorageFaults injects each kind of fault into each kind of write,
// through the file store's file-system seam. Whatever fails, the wrapped
// call returns fn's own result; the loop reports the failure (Report,
// Metrics, log); and once the disk heals, no file is half-written.
func TestStorageFaults(t *testing.T) {
	kinds := map[string]func(path string) bool{
		"state":  func(p string) bool { return strings.Contains(p, string(filepath.Separator)+"agents") },
		"events": func(p string) bool { return strings.Contains(p, "events") },
		"traces": func(p string) bool { return strings.Contains(p, "traces") },
	}
	faults := map[fsx.Op]error{
		fsx.OpCreate:  fsx.ErrNoSpace,
		fsx.OpWrite:   &os.PathError{Op: "write", Path: "x", Err: syscall.EIO},
		fsx.OpPartial: fsx.ErrNoSpace,
		fsx.OpSync:    &os.PathError{Op: "fsync", Path: "x", Err: syscall.EIO},
		fsx.OpRename:  &os.PathError{Op: "rename", Path: "x", Err: syscall.EXDEV},
	}
	for kind, match := range kinds {
		for op, ferr := range faults {
			t.Run(fmt.Sprintf("%s/%s", kind, op), func(t *testing.T) {
				dir := t.TempDir()
				ffs := fsx.NewFaulty(fsx.OS{})
				var l *Loop
				quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
				// Tiny logs rotate on every append, so that log writes rename too.
				st, err := openFileStore(ffs, dir, FileOptions{MaxLogSize: 1, KeepArchives: 2, Logger: quiet,
					OnError: func(error) { l.m.storeErrors.Add(1) }})
				if err != nil {
					t.Fatal(err)
				}
				clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
				strat := StrategyFunc(func(_ context.Context, a Analysis) (*Tweak, error) {
					return &Tweak{Config: Config{Route: fmt.Sprint("r", a.Config.Version)}}, nil
				})
				l, err = New(WithStore(st), WithClock(clk), WithLogger(quiet), WithNotifier(nil),
					WithStrategy(strat), WithTraces(TracesSync), WithTraceQueue(1024, 10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()

				run := func(fail bool) Report {
					t.Helper()
					want := error(nil)
					if fail {
						want = errFn
					}
					rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error { return want })
					if err != want || rep.Err != want {
						t.Fatalf("call returned %v, want fn's %v", err, want)
					}
					return rep
				}
				run(false) // the agent exists, its file will be written
				l.SetConfig("a", Config{Route: "base"})

				ffs.Fail(op, ferr, match)
				var loopErrs int
				for i := range 12 { // a failure pair triggers an apply; the rest verify it
					if rep := run(i < 2); rep.LoopErr != nil {
						loopErrs++
					}
				}
				if err := l.flush(); err != nil {
					loopErrs++
				}
				injected := ffs.Injected(op)
				ffs.Heal()
				if injected == 0 {
					t.Skipf("no %s operation on %s files in this scenario", op, kind)
				}
				if m := l.Metrics(); loopErrs == 0 && m.StoreErrors == 0 && m.TracesDropped == 0 {
					t.Fatalf("%d injected faults went unreported", injected)
				}
				if err := l.Close(); err != nil {
					t.Fatalf("Close after the disk healed: %v", err)
				}
				checkNoHalfWrittenFiles(t, dir)
			})
		}
	}
}

// checkNoHalfWrittenFiles checks that every state file parses, that no
// temporary file is left, and that the logs have no torn or broken line.
func checkNoHalfWrittenFiles(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "agents"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left", e.Name())
			continue
		}
		data, _ := os.ReadFile(filepath.Join(dir, "agents", e.Name()))
		var file struct {
			ID []byte `json:"agent_id_b64"`
		}
		json.Unmarshal(data, &file)
		if _, err := decodeState(data, string(file.ID)); err != nil {
			t.Errorf("state file %s does not parse: %v", e.Name(), err)
		}
	}
	root, _ := os.ReadDir(dir)
	for _, e := range root {
		switch name := e.Name(); {
		case strings.Contains(name, ".tmp"):
			t.Errorf("temporary file %s left", name)
		case strings.HasSuffix(name, ".jsonl"):
			f, _ := os.Open(filepath.Join(dir, name))
			read := func(r io.Reader) (int, error) { return ReadEvents(r, func(Event) error { return nil }) }
			if strings.HasPrefix(name, "traces") {
				read = func(r io.Reader) (int, error) { return ReadTraces(r, func(Trace) error { return nil }) }
			}
			skipped, err := read(f)
			f.Close()
			if err != nil || skipped != 0 {
				t.Errorf("%s: %d lines skipped (%v)", name, skipped, err)
			}
		}
	}
}

func TestUnreadableStateIsNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(ffs fsx.FS) *Loop {
		st, err := openFileStore(ffs, dir, FileOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(WithStore(st), WithLogger(quiet), WithNotifier(nil))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open(fsx.OS{})
	l.SetConfig("a", Config{Route: "learned"})
	l.Close()

	ffs := fsx.NewFaulty(fsx.OS{})
	ffs.Fail(fsx.OpRead, &os.PathError{Op: "read", Path: "x", Err: syscall.EIO}, nil)
	l = open(ffs)
	rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c Config) error {
		if c.Route != "" {
			t.Errorf("ran under %+v, want the default config", c)
		}
		return errFn
	})
	if err != errFn || rep.LoopErr == nil || !errors.Is(rep.LoopErr, syscall.EIO) {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	// The failure memory cannot be read either, so it is not saved, and
	// Close says so.
	if err := l.Close(); err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatal(err)
	}
	// The learned state is still there.
	l = open(fsx.OS{})
	defer l.Close()
	if got := l.Config("a"); got.Route != "learned" {
		t.Fatalf("config = %+v: the unreadable state was overwritten", got)
	}
}

func TestEvictionKeepsAnAgentItCannotSave(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ffs := fsx.NewFaulty(fsx.OS{})
	st, err := openFileStore(ffs, dir, FileOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(WithStore(st), WithLogger(quiet), WithNotifier(nil), WithMaxAgents(1), WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ok := func(context.Context, Config) error { return nil }
	l.ExecuteWithImprovement(context.Background(), "a", ok)
	ffs.Fail(fsx.OpCreate, nil, nil)
	l.ExecuteWithImprovement(context.Background(), "b", ok)
	if m := l.Metrics(); m.Evictions != 0 || m.Agents != 2 {
		t.Fatalf("metrics %+v: an agent that could not be saved was evicted", m)
	}
	ffs.Heal()
	for l.m.agents.Load() > 1 && l.evictOne(nil) {
	}
	if m := l.Metrics(); m.Evictions != 1 || m.Agents != 1 {
		t.Fatalf("metrics %+v after the disk healed", m)
	}
	for _, id := range []string{"a", "b"} {
		if s := l.Stats(id); s.TotalCalls != 1 {
			t.Errorf("agent %s has %d calls, want 1", id, s.TotalCalls)
		}
	}
}
