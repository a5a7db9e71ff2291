package selfimprove_test

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/self-improving-loop/selfimprove"
)

// agentFile is the path of agent id's state file in dir, the only one
// whose name starts with id.
func agentFile(t *testing.T, dir, id string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "agents", id+"_*.json"))
	if len(files) != 1 {
		t.Fatalf("agent %q's state file: %q", id, files)
	}
	return files[0]
}

// TestReadOnlyStoreReportsDamagedAgentFiles: the read-only store names
// the agents' state files it cannot read (UnreadableAgentFiles, which a
// listing passes over) and tells a damaged agent from a missing one
// (CheckAgent); a Loop on it logs a damaged agent without "starting
// afresh", which a reader does not do; nothing in the directory changes.
func TestReadOnlyStoreReportsDamagedAgentFiles(t *testing.T) {
	dir := t.TempDir()
	live, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cut", "big", "fine"} {
		if err := live.MarkCritical(id, true); err != nil {
			t.Fatal(err)
		}
	}
	live.Close()
	cut, big := agentFile(t, dir, "cut"), agentFile(t, dir, "big")
	good, _ := os.ReadFile(cut)
	os.WriteFile(cut, good[:len(good)/2], 0o600)
	os.Truncate(big, 5<<20) // over the bound of a state file, 4 MiB
	before := snapshot(t, dir)

	ro, _ := selfimprove.OpenReadOnlyStore(dir)
	var listed []string
	ro.ListAgents(func(id string) bool { listed = append(listed, id); return true })
	if !slices.Equal(listed, []string{"fine"}) {
		t.Errorf("ListAgents = %q, want [fine]", listed)
	}
	bad, err := ro.UnreadableAgentFiles()
	if err != nil || len(bad) != 2 || bad[0].Path != big || bad[1].Path != cut {
		t.Fatalf("UnreadableAgentFiles = %v, %v; want %s and %s", bad, err, big, cut)
	}
	for _, u := range bad {
		if !errors.Is(u.Err, selfimprove.ErrCorruptState) || strings.Contains(u.Err.Error(), dir) {
			t.Errorf("%s: why %q: want ErrCorruptState, without the path", u.Path, u.Err)
		}
	}
	for id, path := range map[string]string{"cut": cut, "big": big} {
		err := ro.CheckAgent(id)
		var u *selfimprove.UnreadableFile
		if !errors.Is(err, selfimprove.ErrCorruptState) || !errors.As(err, &u) || u.Path != path {
			t.Errorf("CheckAgent(%q) = %v, want ErrCorruptState naming %s", id, err, path)
		}
	}
	if err := ro.CheckAgent("fine"); err != nil {
		t.Errorf("CheckAgent(fine) = %v", err)
	}
	if err := ro.CheckAgent("nobody"); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, selfimprove.ErrCorruptState) {
		t.Errorf("CheckAgent(nobody) = %v, want fs.ErrNotExist", err)
	}

	var log bytes.Buffer
	l, err := selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil),
		selfimprove.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, known := l.View("cut"); known {
		t.Error("View(cut) knows the damaged agent")
	}
	l.Close()
	if s := log.String(); !strings.Contains(s, "cannot be read: left as it is") || strings.Contains(s, "afresh") {
		t.Errorf("the reader's log:\n%s", s)
	}
	if d := cmp.Diff(before, snapshot(t, dir)); d != "" {
		t.Errorf("the directory changed (-before +after):\n%s", d)
	}

	// Repaired as a Loop saves (a new file renamed over it): no longer listed.
	tmp := filepath.Join(dir, "agents", ".repair.tmp")
	os.WriteFile(tmp, good, 0o600)
	if err := os.Rename(tmp, cut); err != nil {
		t.Fatal(err)
	}
	if bad, err := ro.UnreadableAgentFiles(); err != nil || len(bad) != 1 || bad[0].Path != big {
		t.Errorf("after the repair, UnreadableAgentFiles = %v, %v; want %s", bad, err, big)
	}
}
