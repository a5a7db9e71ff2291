package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamagedStateFileIsReportedOnce: with --dir, status, agents and
// agent NAME say once, on the command's last line of stderr, that an
// agent's state file cannot be read, and print no log line about it.
// Before, a log line of the store came first ("ERROR selfimprove: an
// agent's state file cannot be read: not listed (...)") above a table
// that lists the file and counts it as an agent; agent NAME printed a
// log line and then the command's own line, saying it twice.
func TestDamagedStateFileIsReportedOnce(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	files, _ := filepath.Glob(filepath.Join(dir, "agents", "alpha_*.json"))
	if len(files) != 1 {
		t.Fatalf("alpha's state file: %q", files)
	}
	if err := os.WriteFile(files[0], []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"agents"}, {"agents", "--json"}, {"agent", "alpha"}} {
		r := cli(t, nil, append(args, "--dir", dir)...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 4 || len(lines) != 1 || !strings.HasPrefix(lines[0], "selfimprove "+args[0]+": ") ||
			!strings.Contains(lines[0], "cannot be read") || strings.Contains(r.stderr, "not listed") {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit 4 and one line saying the file cannot be read", args, r.code, r.stderr)
		}
	}
}
