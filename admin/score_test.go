package admin_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestScore: a grader in another process scores calls over HTTP; bad
// input gets a 4xx naming the field and changes nothing.
func TestScore(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, MaxBodyBytes: 1024})
	rep, _ := f.l.ExecuteWithImprovement(context.Background(), "alpha", func(ctx context.Context, _ si.Config) error {
		return nil
	})
	body := func(id string, score string) string { return fmt.Sprintf(`{"call_id":%q,"score":%s}`, id, score) }
	for _, c := range []struct {
		name, path, body string
		code             int
		field            string
	}{
		{"not hex", "/api/agents/alpha/score", body("xyz", "0.5"), 400, "call_id"},
		{"short", "/api/agents/alpha/score", body(rep.CallID()[1:], "0.5"), 400, "call_id"},
		{"no score", "/api/agents/alpha/score", fmt.Sprintf(`{"call_id":%q}`, rep.CallID()), 400, "score"},
		{"above 1", "/api/agents/alpha/score", body(rep.CallID(), "1.5"), 400, "score"},
		{"negative", "/api/agents/alpha/score", body(rep.CallID(), "-0.5"), 400, "score"},
		{"unknown call", "/api/agents/alpha/score", body(fmt.Sprintf("%016x", rep.ID^1<<60), "0.5"), 404, "call_id"},
		{"unknown agent", "/api/agents/nobody/score", body(rep.CallID(), "0.5"), 404, "agent"},
		{"unknown field", "/api/agents/alpha/score", `{"call_id":"00","score":1,"x":1}`, 400, "x"},
		{"too big", "/api/agents/alpha/score", body(rep.CallID(), "0.5"+strings.Repeat(" ", 2000)), 413, ""},
	} {
		code, b := f.post(t, c.path, c.body)
		errorOf(t, c.name, code, b, c.code, c.field)
	}
	if code, b := f.do(t, "POST", "/api/agents/alpha/score", "", "application/json", body(rep.CallID(), "0.5")); code != 401 {
		t.Errorf("no token: %d %s", code, b)
	}
	if v, _ := f.l.View("alpha"); v.Versions != nil {
		t.Fatalf("refused scores changed the figures: %+v", v.Versions)
	}
	if code, b := f.post(t, "/api/agents/alpha/score", body(rep.CallID(), "0.25")); code != 200 || !strings.Contains(string(b), `"scored":true`) {
		t.Fatalf("score: %d %s", code, b)
	}
	var d admin.AgentDetail
	f.get(t, "/api/agents/alpha", &d)
	found := false
	for _, v := range d.Versions {
		if v.Version == rep.ConfigVersion {
			found = v.Quality != nil && v.Quality.Scored == 1 && v.Quality.Quality == 0.25
		}
	}
	if !found || d.Routes[""] == nil || d.Routes[""].Scored != 1 {
		t.Errorf("versions %+v, routes %+v", d.Versions, d.Routes)
	}
	if rep.ConfigVersion == f.l.Config("alpha").Version {
		m := httptestGet(admin.Handler(f.l, admin.Options{}), "/metrics")
		if !strings.Contains(m, `selfimprove_quality_mean{agent="alpha"} 0.25`) || !strings.Contains(m, `selfimprove_quality_scored{agent="alpha"} 1`) {
			t.Errorf("metrics lack the quality:\n%s", m)
		}
	}
	f.clk.Advance(si.ScoreHorizon + time.Minute)
	code, b := f.post(t, "/api/agents/alpha/score", body(rep.CallID(), "0.5"))
	errorOf(t, "too late", code, b, 410, "call_id")
}

// TestScoreRateBound: scores share the intake's rate bound (issue 30: the
// score endpoint is rate-bounded).
func TestScoreRateBound(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, OutcomeRate: 1, MaxOutcomes: 1})
	rep, _ := f.l.ExecuteWithImprovement(context.Background(), "alpha", func(context.Context, si.Config) error { return nil })
	body := fmt.Sprintf(`{"call_id":%q,"score":0.5}`, rep.CallID())
	if code, b := f.post(t, "/api/agents/alpha/score", body); code != 200 {
		t.Fatalf("first score: %d %s", code, b)
	}
	code, b := f.post(t, "/api/agents/alpha/score", body)
	errorOf(t, "second score in the same second", code, b, 429, "score")
}

// A score out of [0, 1] is refused before the rate bound and the agent's
// lookup: it is counted among the refused as invalid, and it spends none
// of the rate the good scores share. Before, it was checked only by the
// Loop, after both: the good score after it got a 429, and one for an
// unknown agent got 404 "agent".
func TestInvalidScoreRefusedFirst(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, OutcomeRate: 1, MaxOutcomes: 1})
	rep, _ := f.l.ExecuteWithImprovement(context.Background(), "alpha", func(context.Context, si.Config) error { return nil })
	for _, agent := range []string{"alpha", "nobody"} {
		code, b := f.post(t, "/api/agents/"+agent+"/score", fmt.Sprintf(`{"call_id":%q,"score":1.5}`, rep.CallID()))
		errorOf(t, "score 1.5 of "+agent, code, b, 400, "score")
	}
	if _, m := f.do(t, "GET", "/metrics", token, "", ""); !strings.Contains(string(m), `selfimprove_intake_refused_total{reason="invalid"} 2`) {
		t.Errorf("the refused scores are not counted as invalid:\n%s", m)
	}
	if code, b := f.post(t, "/api/agents/alpha/score", fmt.Sprintf(`{"call_id":%q,"score":0.5}`, rep.CallID())); code != 200 {
		t.Errorf("a good score after the refused ones: %d %s", code, b)
	}
}

// A Loop on a ReadOnlyStore refuses a score, and a config, with 403, as
// selfimprove serve --read-only does. Before, the score was 200
// {"scored":true} and lost, and the config a 500.
func TestReadOnlyLoopRefusesMutations(t *testing.T) {
	dir := t.TempDir()
	l, err := si.New(si.WithDir(dir), si.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(context.Background(), "alpha", func(context.Context, si.Config) error { return nil })
	if err := l.MarkCritical("alpha", false); err != nil { // saves the agent's state
		t.Fatal(err)
	}
	ro, err := si.OpenReadOnlyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := si.New(si.WithStore(ro), si.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := admin.Handler(r, admin.Options{Token: token})
	for _, c := range []struct{ path, body string }{
		{"/api/agents/alpha/score", fmt.Sprintf(`{"call_id":%q,"score":0.5}`, rep.CallID())},
		{"/api/agents/alpha/config", `{"config": {"timeout": "9s"}}`},
	} {
		req := httptest.NewRequest("POST", "http://localhost"+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 403 || !strings.Contains(w.Body.String(), "read-only") {
			t.Errorf("POST %s on a read-only Loop: %d %s, want 403", c.path, w.Code, w.Body)
		}
	}
}
