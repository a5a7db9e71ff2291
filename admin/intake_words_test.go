package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// intakeRefusal posts body to the intake with the intake token and
// returns the refusal it answers, failing unless it is a 400.
func intakeRefusal(t *testing.T, f *fixture, body string) admin.ErrorBody {
	t.Helper()
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", body)
	var e admin.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || code != http.StatusBadRequest {
		t.Fatalf("%s: %d %s, want a 400 ErrorBody", body, code, b)
	}
	return e
}

func newIntakeFixture(t *testing.T) *fixture {
	l, _ := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py"}})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	return f
}

// TestIntakeFractionalVersionSaysWholeNumber: "config_version": 1.5 is a
// JSON number; the refusal says the field must be a whole number, not
// that it must be a JSON number.
func TestIntakeFractionalVersionSaysWholeNumber(t *testing.T) {
	f := newIntakeFixture(t)
	for _, c := range []struct{ body, field, want string }{
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1.5}]}`,
			"outcomes[0].config_version", "outcomes[0].config_version must be a whole number (an integer), not 1.5"},
		{`{"outcomes": [{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "attempts": 2.5}]}`,
			"outcomes[0].attempts", "outcomes[0].attempts must be a whole number (an integer), not 2.5"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1e30}]}`,
			"outcomes[0].config_version", "outcomes[0].config_version is out of range"},
	} {
		e := intakeRefusal(t, f, c.body)
		if e.Field != c.field || !strings.Contains(e.Error, c.want) || strings.Contains(e.Error, "JSON number") {
			t.Errorf("%s: field %q, %q; want field %q saying %q", c.body, e.Field, e.Error, c.field, c.want)
		}
	}
	if n := f.l.Stats("py").Calls; n != 0 {
		t.Errorf("booked %d calls of refused batches", n)
	}
}

// TestIntakeFieldNamesAreCaseSensitive: "SUCCESS" or "Agent" is not the
// field success or agent (encoding/json matches names in any case): it
// is refused as an unknown field, named by its path, and nothing is
// booked. Before, {"Agent": "py", "SUCCESS": true, ...} was booked.
func TestIntakeFieldNamesAreCaseSensitive(t *testing.T) {
	f := newIntakeFixture(t)
	good := `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}`
	for _, c := range []struct{ body, field, want string }{
		{`{"outcomes": [{"agent": "py", "SUCCESS": true, "duration_ms": 5, "config_version": 1}]}`,
			"outcomes[0].SUCCESS", `unknown field "SUCCESS"`},
		{`{"outcomes": [` + good + `, {"Agent": "py", "success": true, "duration_ms": 5, "config_version": 1}]}`,
			"outcomes[1].Agent", `unknown field "Agent"`},
		{`{"Outcomes": [` + good + `]}`, "Outcomes", `unknown field "Outcomes"`},
		{`{"outcomes": [{"agent": "py", "\u017Fuccess": true, "duration_ms": 5, "config_version": 1}]}`, // ſuccess
			"outcomes[0].\u017Fuccess", "unknown field \"\u017Fuccess\""},
		{`{"outcomes": [{"agent": "py", "\u0053uccess": true, "duration_ms": 5, "config_version": 1}]}`,
			"outcomes[0].Success", `unknown field "Success"`},
	} {
		e := intakeRefusal(t, f, c.body)
		if e.Field != c.field || !strings.Contains(e.Error, c.want) || !strings.Contains(e.Error, "case") {
			t.Errorf("%s: field %q, %q; want field %q saying %q and that names are case-sensitive", c.body, e.Field, e.Error, c.field, c.want)
		}
	}
	if n := f.l.Stats("py").Calls; n != 0 {
		t.Errorf("booked %d calls of refused batches", n)
	}
	// The exact names, escaped or not, are booked.
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json",
		`{"outcomes": [`+good+`, {"agent": "py", "\u0073uccess": true, "duration_ms": 5, "config_version": 1}]}`)
	if code != http.StatusOK {
		t.Errorf("a batch with its names as written: %d %s", code, b)
	}
}

// TestIntakeNullOutcomeIsNamed: a null where an outcome is expected is
// refused naming its element (outcomes[1]) and saying null is not an
// outcome; before, it was read as an empty outcome ("outcomes[1].agent
// is required").
func TestIntakeNullOutcomeIsNamed(t *testing.T) {
	f := newIntakeFixture(t)
	good := `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}`
	e := intakeRefusal(t, f, `{"outcomes": [`+good+`, null, `+good+`]}`)
	if e.Field != "outcomes[1]" || !strings.Contains(e.Error, "outcomes[1] is null") || !strings.Contains(e.Error, "not an outcome") {
		t.Errorf("a null outcome: field %q, %q; want field outcomes[1] saying it is null, not an outcome", e.Field, e.Error)
	}
	if n := f.l.Stats("py").Calls; n != 0 {
		t.Errorf("booked %d calls of a refused batch", n)
	}
}

// TestRequestsRefuseFieldsInAnotherCase: every request body is read as
// the intake's is: a field name in another case is an unknown field,
// named by its path, and a fractional number where a whole one is due
// says so.
func TestRequestsRefuseFieldsInAnotherCase(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, SampleEvery: -1})
	for _, c := range []struct{ path, body, field, want string }{
		{"/api/agents/alpha/config", `{"config": {"Timeout": "1s"}}`, "config.Timeout", `config: unknown field "Timeout" (field names are case-sensitive: did you mean "timeout"?)`},
		{"/api/agents/alpha/config", `{"CONFIG": {}}`, "CONFIG", `unknown field "CONFIG"`},
		{"/api/agents/alpha/config", `{"config": {"max_attempts": 2.5}}`, "config.max_attempts", "config.max_attempts must be a whole number (an integer), not 2.5"},
		{"/api/agents/alpha/rewind", `{"version": 1, "Reason": "x"}`, "Reason", `unknown field "Reason"`},
		{"/api/agents/alpha/rewind", `{"version": 1e3, "reason": "x"}`, "version", "version must be a whole number written without a fraction or exponent (1000), not 1e3"},
		{"/api/agents/alpha/critical", `{"Critical": true}`, "Critical", `unknown field "Critical"`},
	} {
		code, b := f.post(t, c.path, c.body)
		var e admin.ErrorBody
		json.Unmarshal(b, &e)
		if code != 400 || e.Field != c.field || !strings.Contains(e.Error, c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 naming %s and saying %q", c.path, c.body, code, b, c.field, c.want)
		}
	}
}

// TestIntakeNullsAreNamed: a null where the intake wants a value is
// refused saying it is null: a required field of an outcome that is null
// (encoding/json reads a null string as no value at all), the outcomes
// that are null, and a body that is just null. Before, they answered
// "outcomes[0].agent is required" and "outcomes must hold 1..N".
func TestIntakeNullsAreNamed(t *testing.T) {
	f := newIntakeFixture(t)
	for _, c := range []struct{ body, field, want string }{
		{`{"outcomes": [{"agent": null, "success": true, "duration_ms": 5, "config_version": 1}]}`, "outcomes[0].agent", "outcomes[0].agent is null"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}, {"agent": "py", "success": null, "duration_ms": 5, "config_version": 1}]}`,
			"outcomes[1].success", "outcomes[1].success is null; it is required: true or false"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": null, "config_version": 1}]}`, "outcomes[0].duration_ms", "outcomes[0].duration_ms is null"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": null}]}`, "outcomes[0].config_version", "outcomes[0].config_version is null"},
		{`{"outcomes": null}`, "outcomes", "outcomes is null"},
		{`null`, "", "the body is null"},
		{" null\n", "", "the body is null"},
	} {
		e := intakeRefusal(t, f, c.body)
		if e.Field != c.field || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: field %q, %q; want field %q saying %q", c.body, e.Field, e.Error, c.field, c.want)
		}
	}
	// A field left out is still said to be required.
	if e := intakeRefusal(t, f, `{"outcomes": [{"success": true, "duration_ms": 5, "config_version": 1}]}`); e.Error != "outcomes[0].agent is required" {
		t.Errorf("an outcome without its agent: %q, want it said required", e.Error)
	}
	if n := f.l.Stats("py").Calls; n != 0 {
		t.Errorf("booked %d calls of refused batches", n)
	}
	// So is any other body that must be an object.
	code, b := f.do(t, "POST", "/api/agents/py/rewind", token, "application/json", "null")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "the body is null") {
		t.Errorf("a rewind whose body is null: %d %s, want 400 saying the body is null", code, b)
	}
}
