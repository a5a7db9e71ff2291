package admin_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// unreadableStore is a RAMStore that cannot read one agent's state (an
// I/O error: a file it may not read, a failing disk).
type unreadableStore struct {
	*si.RAMStore
	bad string
}

func (s unreadableStore) LoadAgent(id string, decode func([]byte) error) error {
	if id == s.bad {
		return errors.New("read agents/" + id + ".json: input/output error")
	}
	return s.RAMStore.LoadAgent(id, decode)
}

// TestIntakePartialBatchSaysWhatWasBooked: a batch whose second outcome
// the loop cannot book (its agent's state cannot be read) after it
// booked the first. Before, the answer was a 500, which clients send
// again whole (docs/intake.md): each try booked the first outcome once
// more. Now the answer is 409 with an OutcomeConflict saying 1 was booked
// and the rest is to be sent again (retry), and sending the rest books
// nothing twice; a failure before anything was booked stays a 5xx, safe
// to send again whole.
func TestIntakePartialBatchSaysWhatWasBooked(t *testing.T) {
	l, clk := newLoop(t, si.WithStore(unreadableStore{si.NewRAMStore(), "py-bad"}))
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py-*"}, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	outcome := func(agent string) string {
		return `{"agent": "` + agent + `", "success": true, "duration_ms": 5, "config_version": 1}`
	}
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json",
		`{"outcomes": [`+outcome("py-good")+`, `+outcome("py-bad")+`, `+outcome("py-good")+`]}`)
	var c struct { // admin.OutcomeConflict
		Field  string `json:"field"`
		Status int    `json:"status"`
		Booked int    `json:"booked"`
		Retry  bool   `json:"retry"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%d %s: %v", code, b, err)
	}
	if code != http.StatusConflict || c.Booked != 1 || !c.Retry || c.Field != "outcomes[1]" || c.Status != http.StatusConflict {
		t.Fatalf("a batch booked in part answered %d %s; want 409, booked 1, retry, field outcomes[1]", code, b)
	}
	if n := l.Stats("py-good").Calls; n != 1 {
		t.Fatalf("py-good has %d calls booked; want the first outcome's", n)
	}
	// The client sends the rest again (outcomes[1:]): py-bad fails first,
	// nothing is booked, and the answer is the loop's 500, safe to resend.
	for try := 1; try <= 2; try++ {
		code, b = f.do(t, "POST", "/api/outcomes", intakeToken, "application/json",
			`{"outcomes": [`+outcome("py-bad")+`, `+outcome("py-good")+`]}`)
		if code != http.StatusInternalServerError {
			t.Errorf("try %d: the rest answered %d %s; want 500, nothing booked", try, code, b)
		}
		if n := l.Stats("py-good").Calls; n != 1 {
			t.Errorf("try %d: py-good has %d calls booked; want 1 (the first outcome, once)", try, n)
		}
	}
}
