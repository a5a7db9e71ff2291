package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// FuzzRequests sends arbitrary bodies and queries to every endpoint: the
// answer is never a 500, and always JSON (or the stream) with a status
// that matches its body.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{`{"version":1,"reason":"x"}`, `{"config":{"timeout":"1s","params":{"a":"b"}}}`,
		`{"failures":3,"window":"1m"}`, `{"critical":true}`, `{"reason":"no"}`, `{}`, `[`, `{"version":1e99}`, "\xff", `{"config":{"max_attempts":-1}}`} {
		f.Add(s, "limit=2&after=a")
	}
	l, _ := newLoop(f)
	l.MarkCritical("a", true)
	h := admin.Handler(l, admin.Options{Token: token})
	paths := []string{"/api/agents/a/rewind", "/api/agents/a/config", "/api/agents/a/threshold", "/api/agents/a/critical",
		"/api/proposals/p/approve", "/api/proposals/p/reject"}
	gets := []string{"/api/agents", "/api/events", "/api/proposals", "/api/similar"}
	f.Fuzz(func(t *testing.T, body, query string) {
		if strings.ContainsAny(query, " #") {
			return
		}
		check := func(req *http.Request) {
			req.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s: %d %s", req.Method, req.URL, rec.Code, rec.Body)
			}
			if rec.Code != 200 {
				var e admin.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != rec.Code || e.Error == "" {
					t.Fatalf("%s %s: %d %q", req.Method, req.URL, rec.Code, rec.Body)
				}
			}
		}
		for _, p := range paths {
			req := httptest.NewRequest("POST", "http://localhost"+p, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			check(req)
		}
		for _, p := range gets {
			req, err := http.NewRequest("GET", p+"?"+query, nil)
			if err != nil {
				return
			}
			check(req)
		}
	})
}
