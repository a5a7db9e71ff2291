package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestIntakeBooksAnOutcomeOnceByItsID: a client whose answer was lost (a
// timeout, a dropped connection) sends the batch again. Before, each
// outcome was booked once more (docs/intake.md said so). Now an outcome
// with an ID the intake booked is not booked again, and the answer
// counts it in duplicates; an outcome without an ID, or with an ID of
// another agent, is booked.
func TestIntakeBooksAnOutcomeOnceByItsID(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py-*"}, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	outcome := func(agent, id string, ok bool) string {
		o := `{"agent": "` + agent + `", "success": ` + map[bool]string{true: "true", false: "false"}[ok] + `, "duration_ms": 5, "config_version": 1`
		if id != "" {
			o += `, "id": "` + id + `"`
		}
		return o + `}`
	}
	batch := `{"outcomes": [` + strings.Join([]string{outcome("py-a", "1", true), outcome("py-a", "2", false), outcome("py-b", "1", true)}, ", ") + `]}`
	post := func(body string) admin.OutcomeResult {
		t.Helper()
		code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", body)
		var r admin.OutcomeResult
		if err := json.Unmarshal(b, &r); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", code, b, err)
		}
		return r
	}
	if r := post(batch); r.Booked != 3 || r.Duplicates != 0 {
		t.Fatalf("first send: booked %d, duplicates %d; want 3, 0", r.Booked, r.Duplicates)
	}
	if r := post(batch); r.Booked != 0 || r.Duplicates != 3 {
		t.Fatalf("the same batch again: booked %d, duplicates %d; want 0, 3", r.Booked, r.Duplicates)
	}
	// A new outcome beside one sent before, one repeated within the
	// batch, and one without an ID.
	again := `{"outcomes": [` + strings.Join([]string{outcome("py-a", "2", false), outcome("py-a", "3", true), outcome("py-a", "3", true), outcome("py-a", "", true)}, ", ") + `]}`
	if r := post(again); r.Booked != 2 || r.Duplicates != 2 {
		t.Fatalf("booked %d, duplicates %d; want 2 (the new ID, the one without), 2", r.Booked, r.Duplicates)
	}
	if st := l.Stats("py-a"); st.Calls != 4 || st.Failures != 1 {
		t.Errorf("py-a: %d calls, %d failures booked; want 4, 1", st.Calls, st.Failures)
	}
	if st := l.Stats("py-b"); st.Calls != 1 {
		t.Errorf("py-b: %d calls booked; want 1", st.Calls)
	}
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json",
		`{"outcomes": [`+outcome("py-a", strings.Repeat("x", 129), true)+`]}`)
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"field":"outcomes[0].id"`) {
		t.Errorf("an ID of 129 bytes: %d %s; want 400 naming outcomes[0].id", code, b)
	}
}
