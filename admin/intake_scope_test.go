package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

const scoreToken = "judge-only-token-value"

// failures is a batch of n failures of agent under version 1.
func failures(agent string, n int) string {
	o := fmt.Sprintf(`{"agent": %q, "success": false, "status": 503, "error": "Service Unavailable", "duration_ms": 5, "config_version": 1}`, agent)
	return `{"outcomes": [` + strings.TrimSuffix(strings.Repeat(o+",", n), ",") + `]}`
}

// TestIntakeTokenScope: the intake token reports for the agents of
// IntakeAgents only (issue 42, finding 2: 40 fake failures moved a Go
// agent from v1 to v2); without IntakeAgents it reports for none; Token
// is not bound by it.
func TestIntakeTokenScope(t *testing.T) {
	l, _ := newLoop(t, si.WithStrategy(fixStrategy("x"))) // any analysis changes the config
	th := si.Threshold{Failures: 3, Window: 3600e9, Cooldown: 60e9}
	for _, id := range []string{"orders", "py-summarize"} {
		if err := l.SetThreshold(id, th); err != nil {
			t.Fatal(err)
		}
	}
	traffic(t, l, nil, "orders", 5, 0) // a Go agent of the program
	serve := func(o admin.Options) *fixture {
		f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, o)))}
		t.Cleanup(f.srv.Close)
		return f
	}
	f := serve(admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py-*", "exact"}})
	code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", failures("orders", 40))
	errorOf(t, "40 failures of a Go agent", code, b, 403, "outcomes[0].agent")
	if v := l.Config("orders").Version; v != 1 || l.Stats("orders").Failures != 0 || len(l.Changes("orders")) != 0 {
		t.Fatalf("the Go agent after the intake token's failures: v%d, %+v", v, l.Stats("orders"))
	}
	// One outcome of another agent refuses the whole batch, wherever it is.
	mixed := strings.Replace(failures("py-summarize", 3), `[{`, `[{"agent": "exactly", "success": true, "duration_ms": 1, "config_version": 1}, {`, 1)
	code, b = f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", mixed)
	errorOf(t, "a batch with an agent not allowed", code, b, 403, "outcomes[0].agent")
	code, b = f.do(t, "GET", "/api/agents/orders/config", intakeToken, "", "")
	errorOf(t, "the Go agent's config", code, b, 403, "agent")
	for _, id := range []string{"py-summarize", "exact"} {
		if code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", failures(id, 1)); code != 200 {
			t.Errorf("%s: %d %s", id, code, b)
		}
		if code, b := f.do(t, "GET", "/api/agents/"+id+"/config", intakeToken, "", ""); code != 200 {
			t.Errorf("%s config: %d %s", id, code, b)
		}
	}
	// The operator's token reports for any agent.
	if code, b := f.do(t, "POST", "/api/outcomes", token, "application/json", failures("orders", 1)); code != 200 {
		t.Errorf("the operator's report: %d %s", code, b)
	}
	// No IntakeAgents: the intake token reports for no agent, and the
	// answer names the option.
	f = serve(admin.Options{Token: token, IntakeToken: intakeToken})
	for _, req := range [][2]string{{"POST", "/api/outcomes"}, {"GET", "/api/agents/py-summarize/config"}} {
		code, b := f.do(t, req[0], req[1], intakeToken, "application/json", failures("py-summarize", 1))
		var e admin.ErrorBody
		if json.Unmarshal(b, &e); code != 403 || !strings.Contains(e.Error, "admin.Options.IntakeAgents") {
			t.Errorf("%s %s without IntakeAgents: %d %s", req[0], req[1], code, b)
		}
	}
}

// TestTokenRights: what each token may do (the table of docs/admin.md):
// the operator's everything; the intake token reports outcomes and reads
// configs of its agents; the score token posts scores of its agents.
func TestTokenRights(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"alpha"},
		ScoreToken: scoreToken, ScoreAgents: []string{"alpha"}})
	call := func(agent string) string {
		rep, _ := f.l.ExecuteWithImprovement(context.Background(), agent, func(context.Context, si.Config) error { return nil })
		return fmt.Sprintf(`{"call_id": %q, "score": 0.5}`, rep.CallID())
	}
	outcome := `{"outcomes": [{"agent": "alpha", "success": true, "duration_ms": 5, "config_version": 1}]}`
	type req struct{ method, path, body string }
	reqs := []req{
		{"GET", "/api/agents", ""},
		{"GET", "/metrics", ""},
		{"GET", "/api/agents/alpha/config", ""},
		{"GET", "/api/agents/beta/config", ""},
		{"POST", "/api/outcomes", outcome},
		{"POST", "/api/outcomes", strings.ReplaceAll(outcome, "alpha", "beta")},
		{"POST", "/api/agents/alpha/score", "ALPHA"},
		{"POST", "/api/agents/beta/score", "BETA"},
		{"POST", "/api/agents/alpha/critical", `{"critical": true}`},
		{"POST", "/api/agents/alpha/config", `{"config": {"timeout": "9s"}}`},
	}
	want := map[string][]int{
		token:       {200, 200, 200, 200, 200, 200, 200, 200, 200, 200},
		intakeToken: {403, 403, 200, 403, 200, 403, 403, 403, 403, 403},
		scoreToken:  {403, 403, 403, 403, 403, 403, 200, 403, 403, 403},
		"":          {401, 401, 401, 401, 401, 401, 401, 401, 401, 401},
	}
	for _, tok := range []string{intakeToken, scoreToken, "", token} {
		for i, r := range reqs {
			body := strings.NewReplacer("ALPHA", call("alpha"), "BETA", call("beta")).Replace(r.body)
			if code, b := f.do(t, r.method, r.path, tok, "application/json", body); code != want[tok][i] {
				t.Errorf("%s %s with %.6q: %d %s, want %d", r.method, r.path, tok, code, b, want[tok][i])
			}
		}
	}
	// Without ScoreAgents, the score token scores no agent; the answer
	// names the option.
	srv := httptest.NewServer(admin.Handler(f.l, admin.Options{Token: token, ScoreToken: scoreToken}))
	t.Cleanup(srv.Close)
	r, _ := http.NewRequest("POST", srv.URL+"/api/agents/alpha/score", strings.NewReader(call("alpha")))
	r.Header.Set("Authorization", "Bearer "+scoreToken)
	r.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e admin.ErrorBody
	if json.NewDecoder(res.Body).Decode(&e); res.StatusCode != 403 || e.Field != "agent" || !strings.Contains(e.Error, "admin.Options.ScoreAgents") {
		t.Errorf("a score without ScoreAgents: %d %+v", res.StatusCode, e)
	}
}
