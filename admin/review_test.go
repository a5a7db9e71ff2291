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
