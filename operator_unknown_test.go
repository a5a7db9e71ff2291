package selfimprove_test

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// An operator's method on an agent that never ran and has no state file:
// the getters, and the actions that take something back or act on what
// the agent has (Rewind, ClearRejected, Approve, Reject), create nothing,
// in memory or on disk, and a Rewind says the agent has no history. The
// settings that configure an agent before its first call (SetConfig,
// Try, SetThreshold, MarkCritical, SetProposeOnly) create it, as
// intended. Before, Rewind("never-ran", 1, ...) answered ErrTweakRejected
// "version 1 is the current config" and left a new agent in memory and a
// state file, and ClearRejected left one too.
func TestOperatorOnANeverRunAgentCreatesNothing(t *testing.T) {
	const id = "never-ran"
	cases := []struct {
		name    string
		do      func(l *si.Loop) error
		want    error  // nil: no error
		wantMsg string // in the error, when want is set
		creates bool
	}{
		{name: "Config", do: func(l *si.Loop) error { l.Config(id); return nil }},
		{name: "Stats", do: func(l *si.Loop) error { l.Stats(id); return nil }},
		{name: "Threshold", do: func(l *si.Loop) error { l.Threshold(id); return nil }},
		{name: "Health", do: func(l *si.Loop) error { l.Health(id); return nil }},
		{name: "Clusters", do: func(l *si.Loop) error { l.Clusters(id); return nil }},
		{name: "Changes", do: func(l *si.Loop) error { l.Changes(id); return nil }},
		{name: "History", do: func(l *si.Loop) error {
			if h := l.History(id); h != nil {
				return errors.New("History is not nil")
			}
			return nil
		}},
		{name: "View", do: func(l *si.Loop) error {
			if _, ok := l.View(id); ok {
				return errors.New("View says the agent is known")
			}
			return nil
		}},
		{name: "Proposals", do: func(l *si.Loop) error { l.Proposals(nil); return nil }},
		{name: "Rewind v1", do: func(l *si.Loop) error { _, err := l.Rewind(id, 1, "why"); return err },
			want: si.ErrUnknownVersion, wantMsg: `agent "never-ran" has no history`},
		{name: "Rewind v3", do: func(l *si.Loop) error { _, err := l.Rewind(id, 3, "why"); return err },
			want: si.ErrUnknownVersion, wantMsg: `agent "never-ran" has no history`},
		{name: "ClearRejected", do: func(l *si.Loop) error { return l.ClearRejected(id) }},
		{name: "Approve", do: func(l *si.Loop) error { return l.Approve("no-such-proposal") }, want: si.ErrProposalNotFound},
		{name: "Reject", do: func(l *si.Loop) error { return l.Reject("no-such-proposal", "no") }, want: si.ErrProposalNotFound},
		{name: "SetConfig", do: func(l *si.Loop) error { return l.SetConfig(id, si.Config{MaxAttempts: 2}) }, creates: true},
		{name: "Try", do: func(l *si.Loop) error { _, err := l.Try(id, si.Config{MaxAttempts: 3}, "try"); return err }, creates: true},
		{name: "SetThreshold", do: func(l *si.Loop) error { return l.SetThreshold(id, si.Threshold{Failures: 2, Window: time.Minute}) }, creates: true},
		{name: "MarkCritical", do: func(l *si.Loop) error { return l.MarkCritical(id, true) }, creates: true},
		{name: "SetProposeOnly", do: func(l *si.Loop) error { return l.SetProposeOnly(id, true) }, creates: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			before := dirFiles(t, e.dir)
			err := c.do(e.l)
			switch {
			case c.want == nil && err != nil:
				t.Errorf("error %v, want none", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("error %v, want %v", err, c.want)
			case c.want != nil && !strings.Contains(err.Error(), c.wantMsg):
				t.Errorf("error %q does not say %q", err, c.wantMsg)
			}
			inMemory := e.l.Metrics().Agents
			known := slices.Collect(e.l.Agents())
			added := slices.DeleteFunc(dirFiles(t, e.dir), func(f string) bool { return slices.Contains(before, f) })
			if c.creates {
				if inMemory != 1 || !slices.Equal(known, []string{id}) || len(added) == 0 {
					t.Errorf("did not create the agent: %d in memory, Agents() %q, new files %q", inMemory, known, added)
				}
				return
			}
			if inMemory != 0 || len(known) != 0 || len(added) != 0 {
				t.Errorf("created the agent: %d in memory, Agents() %q, new files %q", inMemory, known, added)
			}
		})
	}
}

// dirFiles lists the regular files under dir, as paths relative to it.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// loadFails is a user's Store whose reads fail (a disk error), as one
// behind a network share may.
type loadFails struct{ si.Store }

func (s loadFails) LoadAgent(string, func([]byte) error) error {
	return &fs.PathError{Op: "read", Path: "agents/a.json", Err: syscall.EIO}
}

// An agent whose state the store cannot read is not an unknown agent:
// Rewind and ClearRejected report the store's error, as they did before
// they learned to create no agent that never ran (a check that took
// "cannot read" for "no such agent" answered "no history" and nil).
func TestOperatorOnAnUnreadableAgentReportsTheStore(t *testing.T) {
	l, err := si.New(si.WithStore(loadFails{si.NewRAMStore()}), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Rewind("a", 1, "why"); !errors.Is(err, syscall.EIO) {
		t.Errorf("Rewind: %v, want the store's error", err)
	}
	if err := l.ClearRejected("a"); !errors.Is(err, syscall.EIO) {
		t.Errorf("ClearRejected: %v, want the store's error", err)
	}
}
