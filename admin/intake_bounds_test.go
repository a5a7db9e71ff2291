package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// outcome is an outcome of "py" (version 1) with the extra fields.
func outcome(extra string) string {
	return `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1` + extra + `}`
}

// TestIntakeBounds: every bound of POST /api/outcomes (each field's size
// and range, the batch's count, the body's size) answers a 4xx JSON
// error naming the field; and a batch refused for one outcome, wherever
// it is, books none of the others: no call, score or cost, no new agent,
// no config change, and, refused before it reads the loop's state, no
// share of the rate bound (the good batch after the bad ones, as large as
// the burst, is booked). A batch refused on the state (a version the
// agent never had) is charged: TestIntakeChargesFirst.
func TestIntakeBounds(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py", "fresh"}, MaxOutcomes: 3, MaxBodyBytes: 16 << 10,
		OutcomeRate: 0.001, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	// Good outcomes that come before the bad one: a new agent's, and
	// ones with a quality and a cost.
	fresh := `{"agent": "fresh", "success": true, "duration_ms": 5, "config_version": 1, "quality": 0.9, "cost": 1}`
	before := outcome(`, "quality": 0.9, "cost": 1`)
	for _, tc := range []struct {
		bad   string // the bad outcome, or "" for a whole body
		body  string
		code  int
		field string
	}{
		{bad: `{"agent": "` + strings.Repeat("a", si.MaxAgentIDLen+1) + `", "success": true, "duration_ms": 5, "config_version": 1}`, code: 400, field: "agent"},
		{bad: `{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "error": "` + strings.Repeat("x", 4097) + `"}`, code: 400, field: "error"},
		{bad: `{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "code": "` + strings.Repeat("c", 129) + `"}`, code: 400, field: "code"},
		{bad: outcome(`, "duration_ms": 86400001`), code: 400, field: "duration_ms"},
		{bad: outcome(`, "attempts": 101`), code: 400, field: "attempts"},
		{bad: outcome(`, "attempts": -1`), code: 400, field: "attempts"},
		{bad: `{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "status": 600}`, code: 400, field: "status"},
		{bad: outcome(`, "status": 503`), code: 400, field: "status"},
		{bad: outcome(`, "code": "overloaded"`), code: 400, field: "code"},
		{bad: outcome(`, "canceled": true`), code: 400, field: "canceled"},
		{bad: outcome(`, "quality": -0.1`), code: 400, field: "quality"},
		{bad: outcome(`, "cost": 1e13`), code: 400, field: "cost"},
		{bad: outcome(`, "config_version": 0`), code: 400, field: "config_version"},
		{bad: `{"agent": "py", "success": "yes", "duration_ms": 5, "config_version": 1}`, code: 400, field: "success"},
		{bad: `{"agent": "py", "success": true, "duration_ms": 5, "config_version": "1"}`, code: 400, field: "config_version"},
		{bad: `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1, "extra": 1}`, code: 400, field: "extra"},
		{bad: `[]`, code: 400, field: ""},
		{body: `{"outcomes": []}`, code: 400, field: "outcomes"},
		{body: `{"outcomes": [` + strings.Repeat(fresh+",", 3) + outcome("") + `]}`, code: 400, field: "outcomes"},
		{body: `{"outcomes": [` + fresh + `, {"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "error": "` + strings.Repeat("x", 16<<10) + `"}]}`, code: 413},
	} {
		for pos := range 3 {
			body := tc.body
			if tc.bad != "" {
				batch := []string{fresh, before}
				body = `{"outcomes": [` + strings.Join(slices.Insert(batch, pos, tc.bad), ",") + `]}`
			} else if pos > 0 {
				break
			}
			field := tc.field
			if tc.bad != "" {
				field = strings.TrimSuffix(fmt.Sprintf("outcomes[%d].%s", pos, field), ".")
			}
			code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", body)
			errorOf(t, fmt.Sprintf("%.60s… at %d", body[max(0, strings.Index(body, tc.bad)):], pos), code, b, tc.code, field)
		}
	}
	if s := l.Stats("py"); s.Calls != 0 || s.Scored != 0 || s.Costed != 0 || l.Config("py").Version != 1 || len(l.Changes("py")) != 0 {
		t.Errorf("after the refused batches: stats %+v, config %+v, changes %d; want nothing booked", s, l.Config("py"), len(l.Changes("py")))
	}
	if agents := slices.Collect(l.Agents()); len(agents) != 0 {
		t.Errorf("after the refused batches: agents %q, want none", agents)
	}
	// The count bound is inclusive, and the refused batches took nothing
	// from the rate bound (a burst of 3, refilled at one outcome in 1,000
	// seconds).
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", `{"outcomes": [`+fresh+","+before+","+before+`]}`)
	if s := l.Stats("py"); code != 200 || s.Calls != 2 || s.Scored != 2 || s.Costed != 2 || l.Stats("fresh").Calls != 1 {
		t.Errorf("a good batch of 3: %d %s; py stats %+v", code, b, s)
	}
}
