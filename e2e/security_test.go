package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// mounted serves l's admin handler under /selfimprove/ on a host
// application, and returns its URL and the requests that host got
// outside the mount (the favicon aside).
func mounted(t *testing.T, l *si.Loop) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var outside []string
	mux := http.NewServeMux()
	mux.Handle("/selfimprove/", http.StripPrefix("/selfimprove", admin.Handler(l, admin.Options{})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/favicon.ico" {
			mu.Lock()
			outside = append(outside, r.URL.RequestURI())
			mu.Unlock()
		}
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(srv.CloseClientConnections)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(outside)
	}
}

// fetchedOutside lists what the page fetched outside /selfimprove/.
func fetchedOutside(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var out []string
	for _, u := range eval[[]string](t, ctx, `performance.getEntriesByType("resource").map((e) => new URL(e.name).pathname + new URL(e.name).search)`) {
		if !strings.HasPrefix(u, "/selfimprove/") && u != "/favicon.ico" {
			out = append(out, u)
		}
	}
	return out
}

// TestDashboardHashStaysInMount: no value of the URL hash makes the page
// request a path outside where the dashboard is mounted (issue 29, item
// 5: "#/agent/../../../internal/admin-only?do=x" requested
// /internal/admin-only?do=x on the host application).
func TestDashboardHashStaysInMount(t *testing.T) {
	ctx := newBrowser(t)
	d := plainLoop(t)
	d.calls(t, "a", 3, nil)
	base, outside := mounted(t, d.l)
	do := doer(t, ctx)
	do("the page", chromedp.Navigate(base+"/selfimprove/"), until(`document.querySelector("#count").textContent === "1 of 1 agents"`))
	for _, h := range []string{"#/agent/../../../internal/admin-only?do=x", "#/agent/..%2F..%2F..%2Finternal%2Fadmin-only%3Fdo=x",
		"#/agent/%2E%2E/%2E%2E/internal", "#/agent/..", "#/agent/.", "#/agent/%2e%2e", "#/agent/%zz", "#/agent//internal", "#/agent/a"} {
		eval[bool](t, ctx, `location.hash = `+jsString(h)+`; true`)
	}
	// The last hash opens agent "a": the requests of the others were made
	// before it (each is made as its hashchange is handled).
	do("agent a", until(`document.querySelector("#agent-title").textContent === "a"`))
	if u := fetchedOutside(t, ctx); len(u) > 0 {
		t.Errorf("the page fetched %q, outside its mount", u)
	}
	if u := outside(); len(u) > 0 {
		t.Errorf("the server got requests outside the mount: %q", u)
	}
}

// TestDashboardAgentIDStaysInMount: an agent whose ID climbs out of the
// mount ("../../../internal/admin-only?do=x") is opened, its detail and
// its timeline read, with every request inside the mount (item 5: the
// timeline's path was built from the decoded ID, and asked the host
// application for /internal/admin-only?do=x/series?range=day).
func TestDashboardAgentIDStaysInMount(t *testing.T) {
	ctx := newBrowser(t)
	d := plainLoop(t)
	ids := []string{"../../../internal/admin-only?do=x", "a/../../../../x#y"}
	for _, id := range ids {
		d.calls(t, id, 3, nil)
	}
	base, outside := mounted(t, d.l)
	do := doer(t, ctx)
	do("the page", chromedp.Navigate(base+"/selfimprove/"), until(`document.querySelector("#count").textContent === "2 of 2 agents"`))
	for i, id := range ids {
		eval[bool](t, ctx, `location.hash = "#/agent/" + encodeURIComponent(`+jsString(id)+`); true`)
		do("agent "+id, until(`document.querySelector("#agent-title").textContent === `+jsString(id)),
			until(`performance.getEntriesByType("resource").filter((e) => e.name.includes("/series?")).length === `+strconv.Itoa(i+1)))
	}
	if u := fetchedOutside(t, ctx); len(u) > 0 {
		t.Errorf("the page fetched %q, outside its mount", u)
	}
	if u := outside(); len(u) > 0 {
		t.Errorf("the server got requests outside the mount: %q", u)
	}
}

// TestDashboardControlsVisible: C1 controls and bidi controls in agent
// IDs, reasons and error texts show as visible escapes (item 9).
func TestDashboardControlsVisible(t *testing.T) {
	ctx := newBrowser(t)
	d := plainLoop(t)
	id := "evil\u202etxt.exe\u0085"
	d.calls(t, id, 3, errors.New("upstream 503 \u202eoverride\u2066"))
	srv := serve(t, d.l, admin.Options{})
	do := doer(t, ctx)
	do("the page", chromedp.Navigate(srv.URL+"/si/"), until(`document.querySelector("#count").textContent === "1 of 1 agents"`))
	cellText := eval[string](t, ctx, `document.querySelector("#agents tbody td.id a").textContent`)
	eval[bool](t, ctx, `document.querySelector("#agents tbody td.id a").click(); true`)
	do("the agent", until(`document.querySelector("#agent-title").textContent !== ""`))
	title := eval[string](t, ctx, `document.querySelector("#agent-title").textContent`)
	for what, s := range map[string]string{"row": cellText, "title": title} {
		if strings.ContainsAny(s, "\u202e\u0085\u2066") || !strings.Contains(s, `\u202e`) {
			t.Errorf("%s shows %q: the controls are not escaped", what, s)
		}
	}
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
