package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hashes maps each file under dir to the SHA-256 of its content.
func hashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		sum := sha256.Sum256(b)
		m[p] = hex.EncodeToString(sum[:])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDamagedAgentStateFileIsReported: with --dir, an agent whose state
// file is damaged (cut short, not JSON, over its bound) is reported as
// such, exit code 4, by agent, agents and status, which list it and
// count it; the directory is left as it was. Before, agent said "no
// agent" (exit 3, not found), agents and status left it out ("2 agents,
// 0 unhealthy", exit 0) and only a log line said "starting afresh".
func TestDamagedAgentStateFileIsReported(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	files, _ := filepath.Glob(filepath.Join(dir, "agents", "alpha_*.json"))
	if len(files) != 1 {
		t.Fatalf("alpha's state file: %q", files)
	}
	file := files[0]
	name := filepath.Join("agents", filepath.Base(file))
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damage := map[string]func() error{
		"cut short": func() error { return os.WriteFile(file, good[:len(good)/2], 0o600) },
		"not JSON":  func() error { return os.WriteFile(file, []byte("garbage\x1b[2J\n"), 0o600) },
		"over its bound": func() error { // 5 MiB, a sparse file
			if err := os.WriteFile(file, good, 0o600); err != nil {
				return err
			}
			return os.Truncate(file, 5<<20)
		},
	}
	for what, f := range damage {
		t.Run(what, func(t *testing.T) {
			if err := f(); err != nil {
				t.Fatal(err)
			}
			before := hashes(t, dir)

			r := cli(t, nil, "agent", "alpha", "--dir", dir)
			last := lastLine(r.stderr)
			if r.code != 4 || !strings.HasPrefix(last, "selfimprove agent: ") || !strings.Contains(last, name) ||
				!strings.Contains(last, "cannot be read") || strings.Contains(last, "no agent") {
				t.Errorf("agent alpha: exit %d, stderr %q; want exit 4 and a line naming %s, which cannot be read", r.code, r.stderr, name)
			}

			r = cli(t, nil, "agents", "--dir", dir)
			if r.code != 4 || !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, "unreadable") ||
				!strings.Contains(r.stdout, "beta") || !strings.Contains(lastLine(r.stderr), name) {
				t.Errorf("agents: exit %d, stdout:\n%s\nstderr %q; want exit 4, a row for %s marked unreadable", r.code, r.stdout, r.stderr, name)
			}
			var list struct {
				Unreadable []struct {
					File  string `json:"file"`
					Error string `json:"error"`
				} `json:"unreadable"`
			}
			r = cli(t, nil, "agents", "--json", "--dir", dir)
			if !strings.Contains(r.stdout, `"unreadable"`) || r.code != 4 {
				t.Errorf("agents --json: exit %d, no unreadable list:\n%s", r.code, r.stdout)
			} else if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Unreadable) != 1 ||
				list.Unreadable[0].File != name || list.Unreadable[0].Error == "" {
				t.Errorf("agents --json: unreadable = %+v, want %s", list.Unreadable, name)
			}

			r = cli(t, nil, "status", "--dir", dir)
			first, _, _ := strings.Cut(r.stdout, "\n")
			if r.code != 4 || first != "3 agents, 3 unhealthy (1 unreadable), 0 to watch" || !strings.Contains(r.stdout, name) {
				t.Errorf("status: exit %d, stdout:\n%s\nwant exit 4, the file counted and listed", r.code, r.stdout)
			}
			for _, s := range []string{r.stdout, r.stderr} {
				if strings.Contains(s, "afresh") || strings.ContainsRune(s, 0x1b) {
					t.Errorf("status prints %q", s)
				}
			}
			if after := hashes(t, dir); !maps.Equal(before, after) {
				t.Errorf("the directory changed: before %v, after %v", before, after)
			}
		})
	}
	if err := os.WriteFile(file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, nil, nil, "status", "--dir", dir); !strings.HasPrefix(out, "3 agents, ") || strings.Contains(out, "unreadable") {
		t.Errorf("status of the repaired directory:\n%s", out)
	}
	fails(t, nil, 3, `no agent "nobody"`, "agent", "nobody", "--dir", dir)
}

// TestUnknownEventTypeIsAUsageError: events --type with a type no event
// has (rollback, for rolled_back) is a usage error, exit code 2, naming
// the valid types, as proposals --status is; with -f it does not wait.
// Before, it printed "No events." (exit 0), and -f waited forever.
func TestUnknownEventTypeIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"events", "--type", "rollback", "--dir", dir},
		{"events", "-f", "--type", "rolled_back", "--type", "rollback", "--dir", dir},
	} {
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%q waits", args)
		}
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 2 || !strings.Contains(string(out), `"rollback"`) || !strings.Contains(string(out), "rolled_back") ||
			!strings.Contains(string(out), "improvement_applied") {
			t.Errorf("%q: %v %q; want exit 2 naming the valid types", args, err, out)
		}
	}
	var evs struct{ Events []struct{ Type string } }
	ok(t, nil, &evs, "events", "--type", "rolled_back", "--type", "improvement_applied", "--json", "--dir", dir)
	if len(evs.Events) == 0 || slices.ContainsFunc(evs.Events, func(e struct{ Type string }) bool { return e.Type == "proposal_filed" }) {
		t.Errorf("events --type: %+v", evs.Events)
	}
}
