package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestDashboardFiles: the embedded dashboard is served at the root
// without the token (it holds no data), with a strict CSP, and only its
// own files; a custom Dashboard stays behind the token.
func TestDashboardFiles(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	for _, c := range []struct{ path, ctype, has string }{
		{"/", "text/html", `src="app.js"`},
		{"/app.js", "text/javascript", "EventSource cannot"},
		{"/app.css", "text/css", "--bg"},
	} {
		res, err := http.Get(f.srv.URL + "/si" + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(b), c.has) {
			t.Errorf("GET %s: %d %q, want %s with %q", c.path, res.StatusCode, res.Header.Get("Content-Type"), c.ctype, c.has)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: CSP %q", c.path, csp)
		}
		for _, ext := range []string{"http://", "https://", "//fonts", "@import"} {
			if strings.Contains(string(b), ext) && !(c.path == "/app.js" && ext == "http://" && strings.Contains(string(b), `"http://www.w3.org/2000/svg"`)) {
				t.Errorf("GET %s refers to an external resource (%s)", c.path, ext)
			}
		}
	}
	// Nothing else of the embedded tree, and the API still wants the token.
	for _, p := range []string{"/index.html", "/dashboard/app.js", "/app.js/", "/api/agents"} {
		res, err := http.Get(f.srv.URL + "/si" + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 && res.StatusCode != 401 && res.StatusCode != 301 {
			t.Errorf("GET %s: %d", p, res.StatusCode)
		}
		if p == "/api/agents" && res.StatusCode != 401 {
			t.Errorf("GET %s without the token: %d, want 401", p, res.StatusCode)
		}
	}
	// A mutation to a dashboard file is refused.
	if code, _ := f.do(t, "POST", "/app.js", token, "application/json", "{}"); code != 405 {
		t.Errorf("POST /app.js: %d, want 405", code)
	}
	// A custom Dashboard is a read like the others.
	custom := newFixture(t, admin.Options{Token: token, Dashboard: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dash")) })})
	if code, b := custom.do(t, "GET", "/", "", "", ""); code != 401 {
		t.Errorf("custom dashboard without the token: %d %s", code, b)
	}
	if code, b := custom.do(t, "GET", "/", token, "", ""); code != 200 || string(b) != "dash" {
		t.Errorf("custom dashboard: %d %s", code, b)
	}
	if code, _ := custom.do(t, "GET", "/app.js", token, "", ""); code != 404 {
		t.Errorf("custom dashboard: /app.js %d, want 404", code)
	}
}

// TestP95: the agent list and page carry the 95th percentile latency,
// interpolated inside its bucket (see TestQuantileInterpolated).
func TestP95(t *testing.T) {
	f := newFixture(t, admin.Options{})
	// "slow": 19 calls of 40 ms and one of 2 minutes (beyond every bound).
	for i := range 20 {
		d := 40 * time.Millisecond
		if i == 19 {
			d = 2 * time.Minute
		}
		f.l.ExecuteWithImprovement(context.Background(), "slow", func(context.Context, si.Config) error { f.clk.Advance(d); return nil })
	}
	f.l.MarkCritical("idle", true) // no calls
	_, b := f.do(t, "GET", "/api/agents", "", "", "")
	var list admin.AgentList
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	// alpha and beta: their 95th call in the bucket (10, 25] ms, short of
	// its bound; slow: its 19th of 19 in (25, 50] ms, the bound.
	want := map[string]time.Duration{"alpha": 24869565, "beta": 24250 * time.Microsecond, "slow": 50 * time.Millisecond, "idle": 0}
	for _, a := range list.Agents {
		if a.P95Latency != want[a.ID] {
			t.Errorf("%s: p95 %v, want %v", a.ID, a.P95Latency, want[a.ID])
		}
		delete(want, a.ID)
	}
	if len(want) != 0 {
		t.Errorf("not listed: %v", want)
	}
	// 2 of 20 over every bound: the last bound.
	for range 2 {
		f.l.ExecuteWithImprovement(context.Background(), "slow", func(context.Context, si.Config) error { f.clk.Advance(2 * time.Minute); return nil })
	}
	_, b = f.do(t, "GET", "/api/agents/slow", "", "", "")
	var d admin.AgentDetail
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.P95Latency != time.Minute {
		t.Errorf("slow: p95 %v, want %v", d.P95Latency, time.Minute)
	}
}
