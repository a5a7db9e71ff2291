package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestNullsAreNamedOnEveryEndpoint: on every endpoint that takes a JSON
// body, a null where a value is required is refused naming the field and
// saying it is null, as the intake does (TestIntakeNullsAreNamed); so is
// a body that is just null. Before, a null read as no value: "reason is
// required", "critical is required: true or false", "version must be a
// config version" (as if the field were left out).
func TestNullsAreNamedOnEveryEndpoint(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	reject := "/api/proposals/" + f.l.Proposals(nil)[0].ID + "/reject"
	for _, c := range []struct{ path, body, field, want string }{
		{"/api/agents/alpha/rewind", `{"version": null, "reason": "back"}`, "version", "version is null; it must be a config version"},
		{"/api/agents/alpha/rewind", `{"version": 1, "reason": null}`, "reason", "reason is null; it is required"},
		{"/api/agents/alpha/rewind", `null`, "", "the body is null"},
		{"/api/agents/alpha/config", `{"config": null}`, "config", "config is null; it is required"},
		{"/api/agents/alpha/config", `null`, "", "the body is null"},
		{"/api/agents/alpha/try", `{"config": null, "reason": "try"}`, "config", "config is null; it is required"},
		{"/api/agents/alpha/try", `{"config": {}, "reason": null}`, "reason", "reason is null; it is required"},
		{"/api/agents/alpha/try", `null`, "", "the body is null"},
		{"/api/agents/alpha/threshold", `{"failures": null, "window": "1m"}`, "failures", "failures is null; it must be in 1.."},
		{"/api/agents/alpha/threshold", `{"failures": 3, "window": null}`, "window", "window is null; it is required"},
		{"/api/agents/alpha/threshold", `null`, "", "the body is null"},
		{"/api/agents/alpha/critical", `{"critical": null}`, "critical", "critical is null; it is required: true or false"},
		{"/api/agents/alpha/critical", `null`, "", "the body is null"},
		{"/api/agents/alpha/score", `{"call_id": null, "score": 1}`, "call_id", "call_id is null; it must be 16 hexadecimal digits"},
		{"/api/agents/alpha/score", `{"call_id": "00000000000000ff", "score": null}`, "score", "score is null; it is required"},
		{"/api/agents/alpha/score", `null`, "", "the body is null"},
		{reject, `{"reason": null}`, "reason", "reason is null; it is required"},
		{reject, `null`, "", "the body is null"},
	} {
		code, b := f.post(t, c.path, c.body)
		errorOf(t, c.path+" "+c.body, code, b, http.StatusBadRequest, c.field)
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s, want it to say %q", c.path, c.body, code, b, c.want)
		}
	}
	// A field left out is still said to be required.
	if code, b := f.post(t, "/api/agents/alpha/critical", `{}`); !strings.Contains(string(b), `"critical is required: true or false"`) {
		t.Errorf("a body without critical: %d %s, want it said required", code, b)
	}
}
