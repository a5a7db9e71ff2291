package admin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestTypeErrorsSayJSONTypes: a 400 for a value of the wrong JSON type
// names the type in JSON's words, as docs/admin.md's "version must be a
// JSON number". Before, an array field said "JSON slice" and a boolean
// "JSON bool" (Go's kinds).
func TestTypeErrorsSayJSONTypes(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, SampleEvery: -1})
	for _, c := range []struct{ path, body, field, want string }{
		{"/api/outcomes", `{"outcomes": "x"}`, "outcomes", "outcomes must be a JSON array"},
		{"/api/outcomes", `{"outcomes": {}}`, "outcomes", "outcomes must be a JSON array"},
		{"/api/agents/alpha/critical", `{"critical": "yes"}`, "critical", "critical must be a JSON boolean"},
		{"/api/agents/alpha/rewind", `{"version": "2"}`, "version", "version must be a JSON number"},
	} {
		code, b := f.post(t, c.path, c.body)
		var e admin.ErrorBody
		json.Unmarshal(b, &e)
		if code != 400 || e.Field != c.field || !strings.Contains(e.Error, c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 naming %s and saying %q", c.path, c.body, code, b, c.field, c.want)
		}
	}
}
