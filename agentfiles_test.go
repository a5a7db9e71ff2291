package selfimprove_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

func TestFileStoreRefusesWritesAfterClose(t *testing.T) {
	dir := t.TempDir()
	st, err := si.OpenFileStore(dir, si.FileOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"SaveAgent":    st.SaveAgent("a", []byte(`{}`)),
		"SaveMeta":     st.SaveMeta("memory", []byte(`{}`)),
		"AppendEvents": st.AppendEvents([]si.Event{{ID: "x"}}),
		"AppendTraces": st.AppendTraces([]si.Trace{{AgentID: "a"}}),
	} {
		if !errors.Is(err, si.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if files, _ := os.ReadDir(filepath.Join(dir, "agents")); len(files) != 0 {
		t.Fatalf("files written after Close: %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.json")); err == nil {
		t.Fatal("memory.json written after Close")
	}
}

func TestAgentFilesBounded(t *testing.T) {
	const limit = 32
	dir := t.TempDir()
	e := newStoreEnv(t, si.WithMaxAgents(4), withFileStore(t, dir, si.FileOptions{MaxAgentFiles: limit}))
	e.dir = dir
	for i := range 200 {
		e.call(fmt.Sprintf("agent-%03d", i), nil, time.Millisecond)
		if n := len(agentFiles(t, dir)); n > limit {
			t.Fatalf("%d agent files after %d agents, want at most %d", n, i+1, limit)
		}
	}
	e.l.Close()
	e.open()
	// The agents saved last are kept and load; the oldest went first.
	if s := e.l.Stats("agent-199"); s.Calls != 1 {
		t.Fatalf("the newest agent's file was pruned: %+v", s)
	}
	if s := e.l.Stats("agent-000"); s.Calls != 0 {
		t.Fatalf("the oldest agent's file was kept: %+v", s)
	}
}

// A flood of new agent IDs (the intake creates an agent for each) never
// prunes an agent with history: an operator's config, a threshold, a
// change the strategy made. Before, the file saved longest ago went,
// whatever it held: the real agent's operator config was gone after a
// restart.
func TestAgentFilesNeverPruneHistory(t *testing.T) {
	const limit = 32
	dir := t.TempDir()
	var reported []error
	o := si.FileOptions{MaxAgentFiles: limit, OnError: func(err error) { reported = append(reported, err) }}
	e := newStoreEnv(t, si.WithMaxAgents(4), withFileStore(t, dir, o))
	e.dir = dir
	if err := e.l.SetConfig("real", si.Config{Route: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}
	th := si.Threshold{Failures: 7, Window: time.Hour, Cooldown: time.Minute}
	if err := e.l.SetThreshold("tuned", th); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		e.call(fmt.Sprintf("flood-%03d", i), nil, time.Millisecond)
	}
	if n := len(agentFiles(t, dir)); n > limit {
		t.Fatalf("%d agent files, want at most %d", n, limit)
	}
	e.l.Close()
	e.open()
	if c := e.l.Config("real"); c.Route != "gpt-4o" {
		t.Fatalf("the operator's config was pruned by new agent IDs: %+v", c)
	}
	if v, _ := e.l.View("tuned"); !v.Manual || v.Threshold != th {
		t.Fatalf("the operator's threshold was pruned by new agent IDs: %+v", v.Threshold)
	}
	e.l.Close()
	e.openWithStore(si.WithMaxAgents(4), withFileStore(t, dir, o))

	// Agents with history alone over the bound: kept, and reported.
	for i := range limit + 4 {
		if err := e.l.SetConfig(fmt.Sprintf("op-%03d", i), si.Config{Route: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	e.l.Close()
	e.open()
	for i := range limit + 4 {
		if c := e.l.Config(fmt.Sprintf("op-%03d", i)); c.Route != "r" {
			t.Fatalf("op-%03d's operator config was pruned: %+v", i, c)
		}
	}
	if len(reported) == 0 || !strings.Contains(reported[len(reported)-1].Error(), "never pruned") {
		t.Fatalf("agent files over the bound not reported: %v", reported)
	}
}

// Settings without a meaning are refused where they are made; before, a
// negative KeepArchives was taken as the default, 5.
func TestFileOptionsRefused(t *testing.T) {
	for name, o := range map[string]si.FileOptions{
		"KeepArchives":  {KeepArchives: -1},
		"MaxMemorySize": {MaxMemorySize: -1},
	} {
		st, err := si.OpenFileStore(t.TempDir(), o)
		if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s negative: %v, want ErrInvalidOption naming it", name, err)
		}
		if st != nil {
			st.Close()
		}
	}
	for _, o := range []si.FileOptions{{MaxLogSize: -1}, {MaxAgentFiles: -1}, {}} {
		st, err := si.OpenFileStore(t.TempDir(), o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		st.Close()
	}
}
