package admin_test

import (
	"net/url"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// Paging GET /api/agents lists every agent once, also agents whose IDs
// are not UTF-8: next is the last agent's exact reference. Before, it was
// made of the readable ID (bad bytes as U+FFFD): one agent came back page
// after page, and others were never listed.
func TestAgentPagesOverIDsNotUTF8(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	ids := []string{"m\xc0", "m\xd0", "m\xff", "n"}
	for _, id := range ids {
		traffic(t, f.l, f.clk, id, 1, 0)
	}
	seen := map[string]int{}
	after := ""
	for range 20 {
		var page struct {
			Agents []struct{ Ref string } `json:"agents"`
			Next   string                 `json:"next"`
		}
		q := url.Values{"limit": {"1"}}
		if after != "" {
			q.Set("after", after)
		}
		f.get(t, "/api/agents?"+q.Encode(), &page)
		for _, a := range page.Agents {
			id, _ := url.PathUnescape(a.Ref)
			seen[id]++
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	for _, id := range append(ids, "alpha", "beta") {
		if seen[id] != 1 {
			t.Errorf("agent %q listed %d times over the pages", id, seen[id])
		}
	}
}

// POST /try and /config without a config are refused (400, config), and
// an unknown field inside it is named by its path. Before, both applied
// the empty config (the default), and the field was named "timeot".
func TestConfigRequired(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	code, b := f.post(t, "/api/agents/alpha/try", `{"reason":"x"}`)
	errorOf(t, "try without config", code, b, 400, "config")
	code, b = f.post(t, "/api/agents/alpha/config", `{}`)
	errorOf(t, "config without config", code, b, 400, "config")
	code, b = f.post(t, "/api/agents/alpha/try", `{"config":{"timeot":"1s"},"reason":"x"}`)
	errorOf(t, "try, config.timeot", code, b, 400, "config.timeot")
	if code, b := f.post(t, "/api/agents/alpha/config", `{"config":{}}`); code != 200 {
		t.Errorf("the default config, {}: %d %s", code, b)
	}
}
