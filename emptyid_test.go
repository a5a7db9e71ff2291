package selfimprove_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// writeEmptyIDFile leaves in dir/agents the state file an older version
// could write for the empty agent ID: a copy of agent "a"'s, with the ID
// emptied and the file name of the empty ID.
func writeEmptyIDFile(t *testing.T, dir string) string {
	t.Helper()
	sum := sha256.Sum256(nil)
	name := "_" + hex.EncodeToString(sum[:16]) + ".json"
	ents, _ := filepath.Glob(filepath.Join(dir, "agents", "a_*.json"))
	if len(ents) != 1 {
		t.Fatalf("agent files %q", ents)
	}
	b, err := os.ReadFile(ents[0])
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(strings.Replace(string(b), `"agent_id":"a"`, `"agent_id":""`, 1), `"agent_id_b64":"YQ=="`, `"agent_id_b64":""`, 1)
	if s == string(b) {
		t.Fatal("the fixture's agent file has no agent_id_b64 YQ==")
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", name), []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestEmptyAgentIDFileQuarantined: a state file of the empty agent ID,
// which the loop refuses, is never hidden silently (issue 29, item 11): a
// Loop that owns the directory sets it aside and logs it as an error; a
// read-only reader logs it as an error; neither lists it as an agent.
func TestEmptyAgentIDFileQuarantined(t *testing.T) {
	e := newEnv(t)
	e.calls("a", 2, nil, time.Millisecond)
	e.calls("b", 2, errors.New("upstream 503"), time.Millisecond)
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	name := writeEmptyIDFile(t, e.dir)

	var rolog lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&rolog, nil)))
	defer slog.SetDefault(prev)
	ro, err := si.OpenReadOnlyStore(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := si.New(si.WithStore(ro), si.WithNotifier(nil), si.WithLogger(slog.New(slog.NewTextHandler(&rolog, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for id := range rl.Agents() {
		ids = append(ids, id)
	}
	rl.Close()
	if len(ids) != 2 || !strings.Contains(rolog.String(), "level=ERROR") || !strings.Contains(rolog.String(), name) {
		t.Errorf("read-only: agents %q; log %q: the empty ID's file %s is not reported", ids, rolog.String(), name)
	}

	var logs lockedBuffer
	e.open(si.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ids = ids[:0]
	for id := range e.l.Agents() {
		ids = append(ids, id)
	}
	if len(ids) != 2 {
		t.Errorf("agents %q", ids)
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "agents", name)); err == nil {
		t.Errorf("agents/%s, of the empty agent ID, is still in place", name)
	}
	aside, _ := filepath.Glob(filepath.Join(e.dir, "agents", name+".corrupt-*"))
	if len(aside) != 1 || !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), name) {
		t.Errorf("set aside %q; log %q", aside, logs.String())
	}
}
