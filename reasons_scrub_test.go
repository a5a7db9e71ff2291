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
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
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

// TestLoopReasonsKeepTheirWords: the loop's own reasons keep their words;
// only the secrets in them are redacted (issue 40, item 8). Before, the
// scrubber read "first_token_timeout:" and "auth:" as the keys of
// secrets and redacted the word after each: "first_token_timeout:
// <redacted> 3 → 4", "account-wide auth: <redacted> "agent-0"".
func TestLoopReasonsKeepTheirWords(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithStrategy(&si.BuiltinStrategy{}))
	// An account-wide cause: 401s whose text carries a key.
	authFail := errors.New("401 Unauthorized: Incorrect API key provided: sk-proj-AbCdEf0123456789xyzXYZ")
	callEvery(l, clk, "agent-0", 3, time.Second, func(string) error { return authFail })
	var texts []string
	for _, ev := range l.Events(si.EventFilter{AgentIDs: []string{"agent-0"}, Types: []si.EventType{si.EventAccountCause}}) {
		texts = append(texts, ev.Message)
	}
	for _, p := range l.Proposals(nil) {
		texts = append(texts, p.Rationale)
	}
	if len(texts) == 0 {
		t.Fatal("no account-wide cause raised")
	}
	for _, s := range texts {
		if !strings.Contains(s, `account-wide auth: agent "agent-0"`) || strings.Contains(s, "AbCdEf0123456789") {
			t.Errorf("%q: want the loop's words whole and the key redacted", s)
		}
	}
	// A strategy's reason, in the built-in's words for stalls before the
	// first token, is scrubbed as any strategy's is, and keeps them.
	const why = "first_token_timeout: attempts 3 → 4 (5 of the window's 5 failures are first_token_timeout)"
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		c := a.Config
		c.MaxAttempts = 4
		return &si.Tweak{Config: c, Reason: why, Confidence: 0.9}, nil
	})
	l2 := routeLoop(t, clk, si.WithStrategy(strat))
	l2.SetThreshold("b", si.Threshold{Failures: 2, Window: time.Hour})
	callEvery(l2, clk, "b", 3, time.Second, func(string) error { return errors.New("upstream 503: service unavailable") })
	chs := l2.Changes("b")
	if len(chs) == 0 || chs[0].Reason != why {
		t.Errorf("changes %+v: want one whose reason is %q", chs, why)
	}
}
