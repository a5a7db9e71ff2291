package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// editJSON rewrites the JSON document at path with edit.
func editJSON(t *testing.T, path string, edit func(doc map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// escape is a terminal escape sequence: it clears the screen and sets the
// window's title.
const escape = "\x1b[2J\x1b]0;owned\x07"

// TestHostileStateFilesNeverReachTheTerminal: the texts of a damaged or
// hostile state directory (the state of the change under
// verification in an agent's file, a
// remembered cluster's class and a fix's state in memory.json) reach no
// table with an escape sequence or a bidi control. Before, status, agents
// and agent printed a change's state raw, and similar a class and a
// fix's state.
func TestHostileStateFilesNeverReachTheTerminal(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	files, _ := filepath.Glob(filepath.Join(dir, "agents", "alpha_*.json"))
	if len(files) != 1 {
		t.Fatalf("alpha's state file: %q", files)
	}
	editJSON(t, files[0], func(doc map[string]any) {
		doc["verifying"].(map[string]any)["state"] = "verifying" + escape + hostile
	})
	editJSON(t, filepath.Join(dir, "memory.json"), func(doc map[string]any) {
		for _, m := range doc["memories"].([]any) {
			m := m.(map[string]any)
			m["class"] = "overloaded" + escape + hostile
			fixes, _ := m["fixes"].([]any)
			for _, f := range fixes {
				f.(map[string]any)["state"] = "confirmed" + escape + hostile
			}
		}
	})
	for _, args := range [][]string{{"status"}, {"agents"}, {"agent", "alpha"}, {"similar", "upstream 503 unavailable"}} {
		out := ok(t, nil, nil, append(args, "--dir", dir)...)
		if !strings.Contains(out, "verifying") && !strings.Contains(out, "overloaded") {
			t.Errorf("%q: the hostile text is not shown at all:\n%s", args, out)
		}
		for _, r := range out {
			if r < ' ' && r != '\n' || r >= 0x7f && r <= 0x9f || testBidi(r) {
				t.Errorf("%q prints %U:\n%q", args, r, out)
				break
			}
		}
	}
}

// TestExportFailsOnADamagedMemory: export over a memory.json that cannot
// be read (cut short, not JSON, over its bound, a link) fails, exit code 1, printing
// nothing: a backup made with it is not an empty file that looks whole.
// Before, it printed nothing and exited 0. A directory without
// memory.json (nothing remembered yet) exports nothing, exit code 0.
func TestExportFailsOnADamagedMemory(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	mem := filepath.Join(dir, "memory.json")
	good, err := os.ReadFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	if out := ok(t, nil, nil, "export", "--dir", dir); strings.Count(out, "\n") == 0 {
		t.Fatalf("export of the undamaged directory printed nothing")
	}
	damage := map[string]func() error{
		"cut short": func() error { return os.WriteFile(mem, good[:len(good)/2], 0o600) },
		"not JSON":  func() error { return os.WriteFile(mem, []byte("garbage\n"), 0o600) },
		"over its bound": func() error { // 96 MiB, a sparse file
			if err := os.WriteFile(mem, good, 0o600); err != nil {
				return err
			}
			return os.Truncate(mem, 97<<20)
		},
		"a link": func() error {
			if err := os.WriteFile(mem+".real", good, 0o600); err != nil {
				return err
			}
			return os.Symlink(mem+".real", mem)
		},
	}
	for name, f := range damage {
		os.Remove(mem)
		if err := f(); err != nil {
			t.Fatal(err)
		}
		r := cli(t, nil, "export", "--dir", dir)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		last := lines[len(lines)-1]
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(last, "selfimprove export: ") || !strings.Contains(last, "memory.json") {
			t.Errorf("export over a memory.json %s: exit %d, stdout %q, stderr %q; want exit 1, nothing printed, an error naming memory.json",
				name, r.code, r.stdout, r.stderr)
		}
	}
	os.Remove(mem)
	if out := ok(t, nil, nil, "export", "--dir", dir); out != "" {
		t.Errorf("export without memory.json printed %q", out)
	}
}
