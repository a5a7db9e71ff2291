package selfimprove_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// A state file that cannot be parsed is not listed, and the listing says
// so once, naming the file. Before, the agent vanished from every listing
// without a word (selfimprove status: "0 agents").
func TestUnparsableAgentFileLogged(t *testing.T) {
	dir := t.TempDir()
	l, err := si.New(si.WithDir(dir), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"good", "bad"} {
		l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return nil })
		if err := l.MarkCritical(id, false); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "agents", "bad_*.json"))
	if len(files) != 1 {
		t.Fatalf("bad's file: %q", files)
	}
	if err := os.WriteFile(files[0], []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	st, err := si.OpenFileStore(dir, si.FileOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 2 {
		var ids []string
		st.ListAgents(func(id string) bool { ids = append(ids, id); return true })
		if strings.Join(ids, ",") != "good" {
			t.Fatalf("listed %q, want good alone", ids)
		}
		at := time.Now().Add(time.Duration(i+1) * time.Hour) // the directory changed: read again
		os.Chtimes(filepath.Join(dir, "agents"), at, at)
	}
	if n := strings.Count(logs.String(), filepath.Base(files[0])); n != 1 {
		t.Errorf("the unparsable file is named %d times in the log, want once:\n%s", n, logs.String())
	}
}
