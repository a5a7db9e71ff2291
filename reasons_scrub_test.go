package selfimprove_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Secrets a strategy or an operator may put in a reason or a rule.
var reasonSecrets = []string{"sk-live-4f9a8b7c6d5e4f3a2b1c", "Zq9XbT4kLm2NpR7sVw1YcD8fGh3JkQ6tUe5WiO0a", "hunter2hunter2"}

const secretReason = "raise it; key sk-live-4f9a8b7c6d5e4f3a2b1c, Bearer Zq9XbT4kLm2NpR7sVw1YcD8fGh3JkQ6tUe5WiO0a, password=hunter2hunter2"

// TestReasonsScrubbed: the Reason and Rule of a strategy's tweaks and the
// reasons of an operator are scrubbed like error texts before they are
// stored, logged, notified or served (issue 29, item 10).
func TestReasonsScrubbed(t *testing.T) {
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		c := a.Config
		c.Timeout += time.Second
		return &si.Tweak{Config: c, Reason: secretReason, Rule: "rule: " + secretReason, Review: a.AgentID == "b", Confidence: 0.9}, nil
	})
	var logs lockedBuffer
	e := newEnv(t, si.WithStrategy(strat), si.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	for _, id := range []string{"a", "b"} {
		e.l.SetThreshold(id, si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute})
		e.calls(id, 4, errors.New("upstream 503: service unavailable"), 10*time.Millisecond)
	}
	if _, err := e.l.Rewind("a", 1, "operator: "+secretReason); err != nil {
		t.Fatal(err)
	}
	ps := e.l.Proposals(nil)
	if len(ps) == 0 {
		t.Fatal("no proposal")
	}
	if err := e.l.Reject(ps[0].ID, "no: "+secretReason); err != nil {
		t.Fatal(err)
	}
	e.rec.waitFor(t, 3)
	var served strings.Builder
	for _, p := range e.l.Proposals(nil) {
		served.WriteString(p.Rationale + p.Rule + p.Note)
	}
	for _, id := range []string{"a", "b"} {
		for _, c := range e.l.Changes(id) {
			served.WriteString(c.Reason + c.Verdict)
		}
	}
	evs, _ := e.rec.all()
	for _, ev := range evs {
		served.WriteString(ev.Message)
	}
	e.l.ExportMemory(&served)
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	files := []string{"events.jsonl", "memory.json"}
	ents, _ := os.ReadDir(filepath.Join(e.dir, "agents"))
	for _, f := range ents {
		files = append(files, filepath.Join("agents", f.Name()))
	}
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(e.dir, f))
		for _, s := range reasonSecrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s keeps the secret %q", f, s)
			}
		}
	}
	for _, s := range reasonSecrets {
		if strings.Contains(served.String(), s) {
			t.Errorf("the loop's answers and notifications keep the secret %q", s)
		}
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log keeps the secret %q", s)
		}
	}
	if !strings.Contains(served.String(), "raise it") {
		t.Errorf("the reasons are gone: %s", served.String())
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
