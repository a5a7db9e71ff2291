package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

const intakeToken = "intake-only-token-value"

// remote is an agent outside Go as the intake sees it: it reads its
// config over HTTP (with the ETag) and reports its calls in batches.
type remote struct {
	t    *testing.T
	srv  *httptest.Server
	tag  string
	cfg  si.Config
	read int // 200 answers to its config reads
}

func (r *remote) do(method, path, body string, hdr map[string]string) (*http.Response, []byte) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+intakeToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(res))
	return res, []byte(b.String())
}

func readAll(res *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// refresh reads the agent's config unless its ETag is still current.
func (r *remote) refresh(agent string) {
	r.t.Helper()
	res, b := r.do("GET", "/api/agents/"+url.PathEscape(agent)+"/config", "", map[string]string{"If-None-Match": r.tag})
	switch res.StatusCode {
	case http.StatusNotModified:
		return
	case http.StatusOK:
		var ac admin.AgentConfig
		if err := json.Unmarshal(b, &ac); err != nil || res.Header.Get("ETag") == "" || ac.ID != agent {
			r.t.Fatalf("config: %v %q %s", err, res.Header.Get("ETag"), b)
		}
		r.tag, r.cfg = res.Header.Get("ETag"), ac.Config
		r.read++
	default:
		r.t.Fatalf("config: %d %s", res.StatusCode, b)
	}
}

// report posts outcomes and returns the versions the answer gives.
func (r *remote) report(outcomes ...string) admin.OutcomeResult {
	r.t.Helper()
	res, b := r.do("POST", "/api/outcomes", `{"outcomes": [`+strings.Join(outcomes, ",")+`]}`, nil)
	var out admin.OutcomeResult
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.Booked != len(outcomes) {
		r.t.Fatalf("outcomes: %d %s", res.StatusCode, b)
	}
	return out
}

// fixStrategy applies Params["fix"] = fix once.
func fixStrategy(fix string) si.Strategy {
	var once sync.Once
	return si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		var tw *si.Tweak
		once.Do(func() {
			c := a.Config
			c.Params = map[string]string{"fix": fix}
			tw = &si.Tweak{Config: c, Reason: "set fix=" + fix}
		})
		return tw, nil
	})
}

// TestIntakeDecides: an agent outside Go reports a scripted fault (one
// call in two answers 503) through the intake; the loop changes its
// config, which the agent reads (a new ETag) and applies; a good change
// is confirmed, a harmful one (every call fails) rolled back, and the
// agent reads the config before it again.
func TestIntakeDecides(t *testing.T) {
	for _, tc := range []struct {
		fix  string
		want si.ChangeState
	}{{"good", si.ChangeConfirmed}, {"bad", si.ChangeRolledBack}} {
		t.Run(tc.fix, func(t *testing.T) {
			l, clk := newLoop(t, si.WithStrategy(fixStrategy(tc.fix)), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
			srv := httptest.NewServer(admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py"}}))
			t.Cleanup(srv.Close)
			r := &remote{t: t, srv: srv}
			var versions []int
			for i := range 150 { // the quality scores are judged too: a confirmation waits for them
				r.refresh("py")
				if n := len(versions); n == 0 || versions[n-1] != r.cfg.Version {
					versions = append(versions, r.cfg.Version)
				}
				ok := i < 20 || r.cfg.Params["fix"] == "good" || r.cfg.Params["fix"] != "bad" && i%2 == 1
				o := fmt.Sprintf(`{"agent": "py", "success": %t, "duration_ms": 120.5, "config_version": %d, "quality": 0.9, "cost": 0.002}`, ok, r.cfg.Version)
				if !ok {
					o = fmt.Sprintf(`{"agent": "py", "success": false, "status": 503, "code": "overloaded", "error": "Service Unavailable (key sk-abcdefghijklmnopqrstuvwxyz123456)", "duration_ms": 80, "config_version": %d}`, r.cfg.Version)
				}
				if out := r.report(o); len(out.Agents) != 1 || out.Agents[0].ID != "py" || out.Agents[0].ConfigVersion != l.Config("py").Version {
					t.Fatalf("call %d: %+v", i, out)
				}
				clk.Advance(time.Second)
			}
			ch := l.Changes("py")
			if len(ch) != 1 || ch[0].State != tc.want || ch[0].To.Params["fix"] != tc.fix {
				t.Fatalf("changes: %+v", ch)
			}
			want := []int{1, 2}
			if tc.want == si.ChangeRolledBack {
				want = []int{1, 2, 1}
			}
			if fmt.Sprint(versions) != fmt.Sprint(want) || r.read != len(want) {
				t.Errorf("the agent ran versions %v and read its config %d times, want %v", versions, r.read, want)
			}
			cl := l.Clusters("py")
			if len(cl) == 0 || cl[0].Class != "overloaded" || len(cl[0].Examples) == 0 || strings.Contains(strings.Join(cl[0].Examples, " "), "abcdefghij") {
				t.Errorf("clusters: %+v", cl)
			}
		})
	}
}

// TestIntakeRefusesBadInput: each bad batch gets a 4xx naming the field
// and books nothing; the intake token reports but does not act as an
// operator.
func TestIntakeRefusesBadInput(t *testing.T) {
	l, _ := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py"}, MaxOutcomes: 3, MaxBodyBytes: 4096})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	good := `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}`
	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{}`, 400, "outcomes"},
		{`{"outcomes": [` + strings.Repeat(good+",", 3) + good + `]}`, 400, "outcomes"},
		{`{"outcomes": [{"success": true, "duration_ms": 5, "config_version": 1}]}`, 400, "outcomes[0].agent"},
		{`{"outcomes": [` + good + `, {"agent": "py", "duration_ms": 5, "config_version": 1}]}`, 400, "outcomes[1].success"},
		{`{"outcomes": [{"agent": "py", "success": true, "config_version": 1}]}`, 400, "outcomes[0].duration_ms"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": -1, "config_version": 1}]}`, 400, "outcomes[0].duration_ms"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5}]}`, 400, "outcomes[0].config_version"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 7}]}`, 400, "outcomes[0].config_version"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1, "error": "x"}]}`, 400, "outcomes[0].error"},
		{`{"outcomes": [{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "status": 99}]}`, 400, "outcomes[0].status"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1, "quality": 1.5}]}`, 400, "outcomes[0].quality"},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1, "cost": -2}]}`, 400, "outcomes[0].cost"},
		{`{"outcomes": [{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "error": "` + strings.Repeat("x", 4097) + `"}]}`, 413, ""},
		{`{"outcomes": [{"agent": "py", "success": false, "duration_ms": 5, "config_version": 1, "error": "` + strings.Repeat("x", 3000) + `"}]}`, 200, ""},
		{`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1, "extra": 1}]}`, 400, "outcomes[0].extra"},
		{`{"outcomes": [` + good + `, 7]}`, 400, "outcomes[1]"},
		{`{"outcomes": [` + good + `, {"agent": "py", "success": true, "duration_ms": "5", "config_version": 1}]}`, 400, "outcomes[1].duration_ms"},
		{`{"outcomes": {"agent": "py"}}`, 400, "outcomes"},
	} {
		code, b := f.do(t, "POST", "/api/outcomes", intakeToken, "application/json", tc.body)
		if tc.code == 200 {
			if code != 200 {
				t.Errorf("%.80s: %d %s", tc.body, code, b)
			}
			continue
		}
		errorOf(t, tc.body[:min(80, len(tc.body))], code, b, tc.code, tc.field)
	}
	if n := l.Stats("py").Calls; n != 1 {
		t.Errorf("booked %d calls, want the one good batch's", n)
	}
	for _, tc := range []struct {
		method, path, tok, ct string
		code                  int
	}{
		{"POST", "/api/outcomes", "", "application/json", 401},
		{"POST", "/api/outcomes", "wrong", "application/json", 403},
		{"POST", "/api/outcomes", intakeToken, "text/plain", 415},
		{"POST", "/api/agents/py/config", intakeToken, "application/json", 403},
		{"GET", "/api/agents", intakeToken, "", 403},
		{"GET", "/api/agents/py/config", intakeToken, "", 200},
		{"GET", "/api/agents/py/config", token, "", 200},
		{"GET", "/api/agents/py/config", "", "", 401},
		{"PUT", "/api/agents/py/config", token, "application/json", 405},
	} {
		code, b := f.do(t, tc.method, tc.path, tc.tok, tc.ct, good)
		if code != tc.code {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.tok, code, b, tc.code)
		}
	}
}

// TestIntakeRateBound: a batch over the rate gets 429 with Retry-After
// and is not booked; the bound refills with time.
func TestIntakeRateBound(t *testing.T) {
	l, _ := newLoop(t)
	clk := fakeclock.New(t0)
	srv := httptest.NewServer(admin.Handler(l, admin.Options{IntakeToken: intakeToken, IntakeAgents: []string{"py"}, MaxOutcomes: 4, OutcomeRate: 5, Now: clk.Now}))
	t.Cleanup(srv.Close)
	r := &remote{t: t, srv: srv}
	o := `{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}`
	r.report(o, o, o)
	r.report(o, o)
	res, b := r.do("POST", "/api/outcomes", `{"outcomes": [`+o+`]}`, nil)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"field":"outcomes"`) {
		t.Fatalf("over the rate: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
	}
	if n := l.Stats("py").Calls; n != 5 {
		t.Errorf("booked %d calls, want 5", n)
	}
	clk.Advance(200 * time.Millisecond)
	r.report(o)
	if n := l.Stats("py").Calls; n != 6 {
		t.Errorf("booked %d calls, want 6", n)
	}
}

// TestIntakeConfigETag: the config answer carries an ETag; a request
// naming it gets 304, and a change of config a new ETag.
func TestIntakeConfigETag(t *testing.T) {
	l, _ := newLoop(t)
	srv := httptest.NewServer(admin.Handler(l, admin.Options{OpenReads: true}))
	t.Cleanup(srv.Close)
	r := &remote{t: t, srv: srv}
	r.refresh("new agent")
	first := r.tag
	if r.cfg.Version != 1 || r.read != 1 {
		t.Fatalf("an unknown agent's config: %+v", r.cfg)
	}
	for _, inm := range []string{first, "W/" + first, `"x", ` + first, "*"} {
		res, b := r.do("GET", "/api/agents/new%20agent/config", "", map[string]string{"If-None-Match": inm})
		if res.StatusCode != http.StatusNotModified || len(b) != 0 || res.Header.Get("ETag") != first {
			t.Errorf("If-None-Match %s: %d %q %s", inm, res.StatusCode, res.Header.Get("ETag"), b)
		}
	}
	if err := l.SetConfig("new agent", si.Config{Timeout: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r.refresh("new agent")
	if r.tag == first || r.read != 2 || r.cfg.Timeout != 3*time.Second || r.cfg.Version != 2 {
		t.Errorf("after SetConfig: tag %s (was %s), %+v", r.tag, first, r.cfg)
	}
}

// TestIntakeScores: an outcome's quality is booked as a score of its call,
// and its cost as AddCost's, credited to the version it ran under (issues
// 30 and 31).
func TestIntakeScores(t *testing.T) {
	l, clk := newLoop(t)
	srv := httptest.NewServer(admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py"}}))
	t.Cleanup(srv.Close)
	r := &remote{t: t, srv: srv}
	r.refresh("py")
	for i := range 10 {
		q := 0.5 + 0.1*float64(i%2) // 0.5 and 0.6
		r.report(fmt.Sprintf(`{"agent": "py", "success": true, "duration_ms": 10, "config_version": %d, "quality": %g}`, r.cfg.Version, q))
		clk.Advance(time.Second)
	}
	if s := l.Stats("py"); s.Scored != 10 || math.Abs(s.Quality-0.55) > 1e-9 {
		t.Fatalf("stats: %d scored, quality %v; want 10 at 0.55", s.Scored, s.Quality)
	}
	r.report(fmt.Sprintf(`{"agent": "py", "success": true, "duration_ms": 10, "config_version": %d, "cost": 0.25}`, r.cfg.Version))
	r.report(fmt.Sprintf(`{"agent": "py", "success": true, "duration_ms": 10, "config_version": %d, "cost": 0.75}`, r.cfg.Version))
	if s := l.Stats("py"); s.Costed != 2 || math.Abs(s.CostPerSuccess-0.5) > 1e-9 {
		t.Fatalf("stats: %d costed, %v a success; want 2 at 0.5", s.Costed, s.CostPerSuccess)
	}
}
