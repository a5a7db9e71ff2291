package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestTryAndScoreDecision: over HTTP an operator tries a cheaper config
// (POST /try: a change under verification), a grader's late scores roll
// it back, and the score that did says so ("decision": "rolled_back",
// with the change); a retried score answers 200 "duplicate": true and
// counts once; another agent's call ID, or a forged one, is 404; under
// propose-only the config tried is filed as a proposal.
func TestTryAndScoreDecision(t *testing.T) {
	f, call := scoredFixture(t)
	l := f.l
	for range 60 {
		call(0.9)
	}
	other, _ := l.ExecuteWithImprovement(context.Background(), "delta", func(context.Context, si.Config) error { return nil })

	code, b := f.post(t, "/api/agents/gamma/try", `{"config":{"route":"cheap"},"reason":"half the price","author":"ops"}`)
	var res admin.Result
	if err := json.Unmarshal(b, &res); code != 200 || err != nil || res.Change == nil || res.Change.State != si.ChangeVerifying ||
		res.Change.To.Route != "cheap" || res.Change.Reason != "tried by operator: half the price (by ops)" {
		t.Fatalf("try: %d %s", code, b)
	}
	tried := res.Change
	code, b = f.post(t, "/api/agents/gamma/try", `{"config":{"route":"other"},"reason":"while verifying"}`)
	errorOf(t, "try while verifying", code, b, 409, "")
	code, b = f.post(t, "/api/agents/gamma/try", `{"config":{"route":"other"}}`)
	errorOf(t, "try without a reason", code, b, 400, "reason")

	score := func(id uint64, key string) (int, admin.ScoreResult, []byte) {
		body := fmt.Sprintf(`{"call_id":"%016x","score":0.5}`, id)
		if key != "" {
			body = fmt.Sprintf(`{"call_id":"%016x","score":0.5,"key":%q}`, id, key)
		}
		code, b := f.post(t, "/api/agents/gamma/score", body)
		var sr admin.ScoreResult
		if code == 200 {
			if err := json.Unmarshal(b, &sr); err != nil {
				t.Fatal(err)
			}
		}
		return code, sr, b
	}
	var ids []uint64
	for range 40 {
		ids = append(ids, call(-1).ID)
	}
	code, b = f.post(t, "/api/agents/delta/score", fmt.Sprintf(`{"call_id":"%016x","score":0.5}`, ids[0]))
	errorOf(t, "another agent's call", code, b, 404, "call_id")
	code, b = f.post(t, "/api/agents/gamma/score", fmt.Sprintf(`{"call_id":"%016x","score":0.5}`, other.ID))
	errorOf(t, "delta's call scored as gamma's", code, b, 404, "call_id")
	code, b = f.post(t, "/api/agents/gamma/score", fmt.Sprintf(`{"call_id":"%016x","score":0.5}`, ids[0]^0x5a5a<<48))
	errorOf(t, "a forged ID", code, b, 404, "call_id")

	counted := func() int { return mustView(t, l, "gamma").Versions[tried.To.Version].Scored }
	for i, id := range ids {
		code, sr, b := score(id, "")
		if code != 200 || !sr.Scored || sr.Duplicate || sr.Version != tried.To.Version {
			t.Fatalf("score %d: %d %s", i+1, code, b)
		}
		if i == 0 {
			if code, sr, b := score(id, "grader-7"); code != 200 || sr.Duplicate {
				t.Fatalf("a score with a key of its own: %d %s", code, b)
			}
			n := counted()
			if code, sr, b := score(id, "grader-7"); code != 200 || !sr.Duplicate || !sr.Scored || sr.Decision != "" {
				t.Fatalf("a retried score: %d %s, want 200 with duplicate", code, b)
			}
			if counted() != n {
				t.Fatalf("a retried score counted: %d scores, then %d", n, counted())
			}
		}
		if sr.Decision == "" {
			continue
		}
		if sr.Decision != "rolled_back" || sr.Change == nil || sr.Change.ID != tried.ID || sr.Change.State != si.ChangeRolledBack {
			t.Fatalf("score %d decided: %s", i+1, b)
		}
		if c := l.Config("gamma"); c.Route != "" {
			t.Fatalf("config %+v after the rollback", c)
		}
		tryProposeOnly(t, f)
		return
	}
	t.Fatal("40 late scores of 0.5 against 0.9 did not roll the tried config back")
}

// scoredFixture serves a loop with no strategy whose calls carry a score
// slot, and returns a call of agent "gamma" that scores itself (score
// ≥ 0) or not, the clock moving 2 ms.
func scoredFixture(t *testing.T) (*fixture, func(score float64) si.Report) {
	l, clk := newLoop(t, si.WithStrategy(nil))
	f := &fixture{l: l, clk: clk}
	f.srv = httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, admin.Options{Token: token})))
	t.Cleanup(f.srv.Close)
	ctx := context.Background()
	_ = l.AddScore(ctx, 0) // the calls carry a score slot from now on
	return f, func(score float64) si.Report {
		rep, err := l.ExecuteWithImprovement(ctx, "gamma", func(ctx context.Context, _ si.Config) error {
			clk.Advance(2 * time.Millisecond)
			if score >= 0 {
				return l.AddScore(ctx, score)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

// tryProposeOnly: for a propose-only agent, POST /try files the config
// as a proposal, and applies nothing.
func tryProposeOnly(t *testing.T, f *fixture) {
	t.Helper()
	if err := f.l.SetProposeOnly("gamma", true); err != nil {
		t.Fatal(err)
	}
	code, b := f.post(t, "/api/agents/gamma/try", `{"config":{"route":"other"},"reason":"filed"}`)
	var res admin.Result
	if err := json.Unmarshal(b, &res); code != 200 || err != nil || res.Change != nil || res.Proposal == nil ||
		res.Proposal.Status != si.ProposalPending || res.Proposal.Config == nil || res.Proposal.Config.Route != "other" {
		t.Fatalf("try under propose-only: %d %s", code, b)
	}
}

// mustView is l's view of agent id.
func mustView(t *testing.T, l *si.Loop, id string) si.AgentView {
	t.Helper()
	v, ok := l.View(id)
	if !ok {
		t.Fatalf("no agent %q", id)
	}
	return v
}

// TestTryNeedsOperator: POST /try is an operator's mutation: the intake
// and score tokens get 403, no token 401, and nothing is tried.
func TestTryNeedsOperator(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"alpha"},
		ScoreToken: scoreToken, ScoreAgents: []string{"alpha"}})
	before := len(f.l.Changes("alpha"))
	body := `{"config":{"route":"cheap"},"reason":"half the price"}`
	for _, c := range []struct {
		tok  string
		code int
	}{{intakeToken, 403}, {scoreToken, 403}, {"", 401}} {
		if code, b := f.do(t, "POST", "/api/agents/alpha/try", c.tok, "application/json", body); code != c.code {
			t.Errorf("token %q: %d %s, want %d", c.tok, code, b, c.code)
		}
	}
	if n := len(f.l.Changes("alpha")); n != before {
		t.Errorf("%d changes after refused tries, %d before", n, before)
	}
}
