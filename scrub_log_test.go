package selfimprove_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// secretStore is a RAMStore whose SaveAgent fails, while fail is set, with
// an error that quotes a connection string holding a password, as a
// database or Redis client's error does.
type secretStore struct {
	*si.RAMStore
	fail atomic.Bool
}

const leakedSecret = "hunter2hunter2"

func (s *secretStore) SaveAgent(id string, state []byte) error {
	if s.fail.Load() {
		return errors.New("dial redis://admin:" + leakedSecret + "@db.internal:6379: password=" + leakedSecret + " refused")
	}
	return s.RAMStore.SaveAgent(id, state)
}

// TestRollbackFailedKeepsNoSecret: failure.Scrub's doc says the loop
// scrubs every error text before it keeps, stores, logs or sends it.
// Before, an EventRollbackFailed carried the store's error text in
// Event.Err as it was: a password in it reached the notifier (and so a
// notify.Webhook's body and notify.Log's lines), the event log and the
// loop's log.
func TestRollbackFailedKeepsNoSecret(t *testing.T) {
	st := &secretStore{RAMStore: si.NewRAMStore()}
	var logs bytes.Buffer
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}}}
	e := newStoreEnv(t, si.WithStore(st), si.WithStrategy(strat),
		si.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	applyTweak(t, e, "a")
	e.calls("a", 4, errBoom, 0)
	st.fail.Store(true)
	rep := e.call("a", errBoom, 0)
	if rep.Rollback == nil || rep.LoopErr == nil {
		t.Fatalf("report = %+v", rep)
	}
	st.fail.Store(false)
	e.rec.waitFor(t, 2)
	if err := e.l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	evs, _ := e.rec.all()
	for _, ev := range evs {
		if ev.Type == si.EventRollbackFailed && strings.Contains(ev.Err, leakedSecret) {
			t.Errorf("notified %s with Err %q: the password reaches the notifier", ev.Type, ev.Err)
		}
	}
	for _, ev := range st.Events() {
		if strings.Contains(ev.Err, leakedSecret) {
			t.Errorf("stored %s with Err %q: the password reaches the event log", ev.Type, ev.Err)
		}
	}
	if strings.Contains(logs.String(), leakedSecret) {
		i := strings.Index(logs.String(), leakedSecret)
		t.Errorf("the loop's log holds the password: ...%s...", logs.String()[max(0, i-200):i+20])
	}
}

// errStrategy fails with an error that quotes a bearer token, as an HTTP
// client's error with its request dumped does.
type errStrategy struct{}

func (errStrategy) Analyze(context.Context, si.Analysis) (*si.Tweak, error) {
	return nil, errors.New("llm strategy: POST /v1/chat: 401 (Authorization: Bearer abcdefghijklmnopQRST12345678; api_key=" + leakedSecret + ")")
}

// TestLoggedErrorsAreScrubbed: docs/operations.md says the loop runs
// Scrub over every error it logs. Before, a strategy's error was logged
// as it was, a bearer token and an API key with it.
func TestLoggedErrorsAreScrubbed(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, si.WithStrategy(errStrategy{}), si.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	e.calls("a", 3, errBoom, time.Millisecond)
	e.l.Close()
	if s := logs.String(); strings.Contains(s, leakedSecret) || strings.Contains(s, "abcdefghijklmnopQRST12345678") {
		i := strings.Index(s, "strategy failed")
		t.Errorf("the log holds the strategy error's secrets: %s", s[max(i, 0):min(len(s), max(i, 0)+260)])
	}
}
