package selfimprove_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

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
	e := newEnv(t, si.WithMaxAgents(4), withFileStore(t, dir, si.FileOptions{MaxAgentFiles: limit}))
	e.dir = dir
	files := func() int {
		ents, err := os.ReadDir(filepath.Join(e.dir, "agents"))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	for i := range 200 {
		id := fmt.Sprintf("agent-%03d", i)
		if err := e.l.SetConfig(id, si.Config{Route: id}); err != nil {
			t.Fatal(err)
		}
		if n := files(); n > limit {
			t.Fatalf("%d agent files after %d agents, want at most %d", n, i+1, limit)
		}
	}
	e.l.Close()
	e.open()
	// The agents saved last are kept and load; the oldest went first.
	if c := e.l.Config("agent-199"); c.Route != "agent-199" {
		t.Fatalf("the newest agent's config was lost: %+v", c)
	}
	if c := e.l.Config("agent-000"); c.Route != "" || c.Version != 1 {
		t.Fatalf("the oldest agent's file was kept: %+v", c)
	}
}
