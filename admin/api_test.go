package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func TestAgents(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	var list admin.AgentList
	f.get(t, "/api/agents", &list)
	if len(list.Agents) != 2 || list.Agents[0].ID != "alpha" || list.Agents[1].ID != "beta" || list.Next != "" {
		t.Fatalf("agents: %+v", list)
	}
	a := list.Agents[0]
	st := f.l.Stats("alpha")
	if a.ConfigVersion != f.l.Config("alpha").Version || a.ConfigVersion < 2 || a.ChangeState != si.ChangeVerifying ||
		a.Stats.Calls != st.Calls || a.Profile != si.ProfileManual || a.Threshold.Failures != 3 || !a.Loaded || a.Ref != "alpha" {
		t.Errorf("alpha: %+v", a)
	}
	if b := list.Agents[1]; b.PendingProposals != 1 || b.Healthy || b.Health != f.l.Health("beta") {
		t.Errorf("beta: %+v", b)
	}

	// Paging and filters.
	f.get(t, "/api/agents?limit=1", &list)
	if len(list.Agents) != 1 || list.Agents[0].ID != "alpha" || list.Next != "alpha" {
		t.Fatalf("page 1: %+v", list)
	}
	f.get(t, "/api/agents?limit=1&after="+list.Next, &list)
	if len(list.Agents) != 1 || list.Agents[0].ID != "beta" || list.Next != "" {
		t.Fatalf("page 2: %+v", list)
	}
	f.get(t, "/api/agents?prefix=be", &list)
	if len(list.Agents) != 1 || list.Agents[0].ID != "beta" {
		t.Fatalf("prefix: %+v", list)
	}
	traffic(t, f.l, f.clk, "gamma", 20, 0)
	f.get(t, "/api/agents?unhealthy=true", &list)
	for _, a := range list.Agents {
		if a.ID == "gamma" || a.Healthy {
			t.Errorf("unhealthy lists %+v", a)
		}
	}
	if len(list.Agents) == 0 {
		t.Error("unhealthy lists none")
	}
}

func TestAgentDetail(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	var d admin.AgentDetail
	f.get(t, "/api/agents/alpha", &d)
	hist := f.l.History("alpha")
	if d.ID != "alpha" || !d.Config.Equal(f.l.Config("alpha")) || len(d.Versions) != len(hist) || len(d.Versions) < 2 {
		t.Fatalf("detail: %+v", d)
	}
	v1, cur := d.Versions[0], d.Versions[len(d.Versions)-1]
	if v1.Version != 1 || v1.MadeBy != "default" || v1.Current {
		t.Errorf("v1: %+v", v1)
	}
	if !cur.Current || cur.MadeBy != "strategy" || cur.Reason != "raise the timeout" || cur.Change == nil ||
		cur.Change.State != si.ChangeVerifying || cur.At.IsZero() || cur.Change.Before.Calls == 0 {
		t.Errorf("current: %+v", cur)
	}
	if len(d.Changes) != len(f.l.Changes("alpha")) || len(d.Clusters) == 0 || d.Proposals == nil {
		t.Errorf("detail lists: %d changes, %d clusters", len(d.Changes), len(d.Clusters))
	}
	code, b := f.do(t, "GET", "/api/agents/nobody", token, "", "")
	errorOf(t, "unknown agent", code, b, 404, "agent")
}

// TestAgentIDsRoundTrip addresses agents whose IDs hold path and URL
// syntax, spaces, NUL and bytes that are not UTF-8.
func TestAgentIDsRoundTrip(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	ids := []string{"a/b", "50%", "with space", "nul\x00byte", "bad\xff\xfeutf8", "q?x=1#f", "é/..", strings.Repeat("x", si.MaxAgentIDLen)}
	for _, id := range ids {
		traffic(t, f.l, f.clk, id, 2, 0)
	}
	seen := map[string]bool{}
	next := ""
	for {
		var list admin.AgentList
		f.get(t, "/api/agents?limit=3&after="+url.QueryEscape(next), &list)
		for _, a := range list.Agents {
			id, err := url.PathUnescape(a.Ref)
			if err != nil {
				t.Fatal(err)
			}
			seen[id] = true
		}
		if next = list.Next; next == "" {
			break
		}
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("%q not listed", id)
		}
		var d admin.AgentDetail
		f.get(t, "/api/agents/"+admin.Ref(id), &d)
		if got, _ := url.PathUnescape(d.Ref); got != id || d.Stats.Calls != 2 {
			t.Errorf("%q: got %q with %d calls", id, got, d.Stats.Calls)
		}
		code, b := f.post(t, "/api/agents/"+admin.Ref(id)+"/critical", `{"critical":true}`)
		if code != 200 {
			t.Errorf("%q: critical: %d %s", id, code, b)
		}
		if _, prof := f.l.Threshold(id); prof != si.ProfileCritical {
			t.Errorf("%q: profile %v after critical", id, prof)
		}
	}
	code, b := f.do(t, "GET", "/api/agents/"+strings.Repeat("x", si.MaxAgentIDLen+1), token, "", "")
	errorOf(t, "long ID", code, b, 400, "agent")
}

func TestRewind(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	code, b := f.post(t, "/api/agents/alpha/rewind", `{"version":1,"reason":"the timeout hides a slow model","author":"alice"}`)
	if code != 200 {
		t.Fatalf("rewind: %d %s", code, b)
	}
	var res admin.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	cfg := f.l.Config("alpha")
	if res.Change == nil || res.Change.From.Version < 2 || res.Change.To.Version != cfg.Version || !cfg.Equal(f.l.History("alpha")[0]) ||
		!strings.Contains(res.Change.Reason, "the timeout hides a slow model (by alice)") || res.Change.State != si.ChangeVerifying ||
		res.Agent == nil || res.Agent.ConfigVersion != cfg.Version {
		t.Fatalf("rewind: %s", b)
	}
	var d admin.AgentDetail
	f.get(t, "/api/agents/alpha", &d)
	if cur := d.Versions[len(d.Versions)-1]; cur.MadeBy != "rewind" || cur.Version != cfg.Version {
		t.Errorf("after rewind: %+v", cur)
	}

	// Unverified: installed as the operator's config.
	code, b = f.post(t, "/api/agents/alpha/rewind", `{"version":2,"reason":"back","verify":false}`)
	if code != 200 || f.l.Config("alpha").Version != cfg.Version+1 || f.l.Config("alpha").MaxAttempts != 2 {
		t.Fatalf("unverified rewind: %d %s", code, b)
	}
	f.get(t, "/api/agents/alpha", &d)
	if cur := d.Versions[len(d.Versions)-1]; cur.MadeBy != "operator" || cur.Change == nil || cur.Change.State != si.ChangeConfirmed {
		t.Errorf("after unverified rewind: %+v", cur)
	}

	for _, c := range []struct {
		body, field string
		code        int
	}{
		{`{"version":99,"reason":"x"}`, "version", 400},
		{`{"version":0,"reason":"x"}`, "version", 400},
		{`{"version":1}`, "reason", 400},
		{`{"version":1,"reason":"` + strings.Repeat("r", 513) + `"}`, "reason", 400},
		{`{"version":"1","reason":"x"}`, "version", 400},
		{`{"version":1,"reason":"x","extra":1}`, "extra", 400},
		{`{"version":1,"reason":"x"} {}`, "", 400},
		{`{"version":1,`, "", 400},
		{`[1]`, "", 400},
		{``, "", 400},
		{`{"version":` + strconv.Itoa(f.l.Config("alpha").Version) + `,"reason":"x","verify":false}`, "version", 409},
	} {
		code, b := f.post(t, "/api/agents/alpha/rewind", c.body)
		errorOf(t, "rewind "+c.body, code, b, c.code, c.field)
	}
	code, b = f.post(t, "/api/agents/nobody/rewind", `{"version":1,"reason":"x"}`)
	errorOf(t, "rewind unknown", code, b, 404, "agent")
}

func TestSetConfigThresholdCritical(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	code, b := f.post(t, "/api/agents/beta/config", `{"config":{"timeout":"3s","max_attempts":4,"backoff":"250ms","route":"big","params":{"temperature":"0.2"}}}`)
	if code != 200 {
		t.Fatalf("config: %d %s", code, b)
	}
	cfg := f.l.Config("beta")
	want := si.Config{Timeout: 3 * time.Second, MaxAttempts: 4, Backoff: 250 * time.Millisecond, Route: "big", Params: map[string]string{"temperature": "0.2"}}
	if !cfg.Equal(want) || cfg.Version < 2 {
		t.Errorf("config %+v", cfg)
	}
	code, b = f.post(t, "/api/agents/beta/threshold", `{"failures":7,"window":"30m","cooldown":"1m"}`)
	if th, prof := f.l.Threshold("beta"); code != 200 || prof != si.ProfileManual || th != (si.Threshold{Failures: 7, Window: 30 * time.Minute, Cooldown: time.Minute}) {
		t.Errorf("threshold: %d %s: %+v %v", code, b, th, prof)
	}
	code, b = f.post(t, "/api/agents/beta/critical", `{"critical":true}`)
	if code != 200 {
		t.Errorf("critical: %d %s", code, b)
	}
	code, b = f.post(t, "/api/agents/beta/threshold", `{"clear":true}`)
	if _, prof := f.l.Threshold("beta"); code != 200 || prof != si.ProfileCritical {
		t.Errorf("clear: %d %s: %v", code, b, prof)
	}
	for _, c := range []struct{ path, body, field string }{
		{"config", `{"config":{"timeout":"soon"}}`, "config.timeout"},
		{"config", `{"config":{"timeout":"-1s"}}`, "config.timeout"},
		{"config", `{"config":{"max_attempts":101}}`, "config.max_attempts"},
		{"config", `{"config":{"max_attempts":1.5}}`, "config.max_attempts"},
		{"config", `{"config":{"version":3}}`, "config.version"}, // a nested field by its path (was "version")
		{"config", `{"config":{"timeot":"1s"}}`, "config.timeot"},
		{"config", `{}`, "config"}, // no config: before, the default config was set
		{"config", `{"config":{"params":{"k":1}}}`, "config.params"},
		{"threshold", `{"failures":0,"window":"1m"}`, "failures"},
		{"threshold", `{"failures":65,"window":"1m"}`, "failures"},
		{"threshold", `{"failures":3}`, "window"},
		{"threshold", `{"failures":3,"window":"1m","cooldown":"x"}`, "cooldown"},
		{"threshold", `{"failures":3,"window":"9000h"}`, "window"}, // the loop's check, named by the body's field (was "threshold")
		{"threshold", `{"failures":3,"window":"1m","cooldown":"9000h"}`, "cooldown"},
		{"threshold", `{"clear":true,"failures":3}`, "clear"},
		{"critical", `{}`, "critical"},
		{"critical", `{"critical":"yes"}`, "critical"},
	} {
		code, b := f.post(t, "/api/agents/beta/"+c.path, c.body)
		errorOf(t, c.path+" "+c.body, code, b, 400, c.field)
	}
}

func TestProposals(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	var list admin.ProposalList
	f.get(t, "/api/proposals?status=pending", &list)
	if len(list.Proposals) != 1 || list.Proposals[0].AgentID != "beta" {
		t.Fatalf("proposals: %+v", list)
	}
	id := list.Proposals[0].ID
	f.get(t, "/api/proposals?status=rejected", &list)
	if len(list.Proposals) != 0 {
		t.Errorf("rejected: %+v", list)
	}
	code, b := f.do(t, "GET", "/api/proposals?status=maybe", token, "", "")
	errorOf(t, "bad status", code, b, 400, "status")

	code, b = f.post(t, "/api/proposals/"+id+"/reject", `{}`)
	errorOf(t, "reject without reason", code, b, 400, "reason")
	code, b = f.post(t, "/api/proposals/nope/approve", `{}`)
	errorOf(t, "approve unknown", code, b, 404, "id")
	code, b = f.post(t, "/api/proposals/nope/reject", `{"reason":"x"}`)
	errorOf(t, "reject unknown", code, b, 404, "id")

	code, b = f.post(t, "/api/proposals/"+id+"/approve", ``)
	var res admin.Result
	if code != 200 || json.Unmarshal(b, &res) != nil || res.Proposal == nil || res.Proposal.Status != si.ProposalApplied || res.Change == nil {
		t.Fatalf("approve: %d %s", code, b)
	}
	code, b = f.post(t, "/api/proposals/"+id+"/reject", `{"reason":"changed my mind"}`)
	errorOf(t, "reject applied", code, b, 409, "")

	// A second proposal, rejected.
	f.post(t, "/api/proposals/"+id+"/approve", `{}`)
	f.l.Rewind("beta", 1, "clean slate")
	traffic(t, f.l, f.clk, "delta", 20, 4)
	f.get(t, "/api/proposals?status=pending&agent=delta", &list)
	if len(list.Proposals) != 1 {
		t.Fatalf("delta proposals: %+v", list)
	}
	code, b = f.post(t, "/api/proposals/"+list.Proposals[0].ID+"/reject", `{"reason":"the quota is fine"}`)
	if code != 200 || json.Unmarshal(b, &res) != nil || res.Proposal.Status != si.ProposalRejected || res.Proposal.Note != "the quota is fine" {
		t.Fatalf("reject: %d %s", code, b)
	}
}

func TestEventsAndSimilar(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	var list admin.EventList
	f.get(t, "/api/events", &list)
	if len(list.Events) < 4 {
		t.Fatalf("events: %+v", list)
	}
	for _, e := range list.Events {
		if e.AgentRef != admin.Ref(e.AgentID) || e.ID == "" {
			t.Errorf("event %+v", e)
		}
	}
	f.get(t, "/api/events?agent=alpha&type=improvement_applied", &list)
	if len(list.Events) != 1 || list.Events[0].Change == nil || list.Events[0].Change.Reason != "raise the timeout" {
		t.Fatalf("filtered: %+v", list)
	}
	all := f.l.Events(si.EventFilter{})
	f.get(t, "/api/events?limit=2", &list)
	if len(list.Events) != 2 || list.Events[1].ID != all[len(all)-1].ID {
		t.Errorf("limit: %+v", list)
	}
	f.get(t, "/api/events?limit=2&before="+list.Events[0].ID, &list)
	if len(list.Events) != 2 || list.Events[1].ID != all[len(all)-3].ID {
		t.Errorf("before: %+v", list)
	}
	f.get(t, "/api/events?after="+all[0].ID, &list)
	if len(list.Events) != len(all)-1 {
		t.Errorf("after: %d events", len(list.Events))
	}
	f.get(t, "/api/events?since="+f.clk.Now().Add(time.Hour).Format(time.RFC3339), &list)
	if len(list.Events) != 0 {
		t.Errorf("since: %+v", list)
	}
	for _, c := range []struct{ q, field string }{
		{"limit=0", "limit"}, {"limit=x", "limit"}, {"limit=1001", "limit"}, {"since=yesterday", "since"}, {"until=1", "until"},
	} {
		code, b := f.do(t, "GET", "/api/events?"+c.q, token, "", "")
		errorOf(t, c.q, code, b, 400, c.field)
	}

	var sim admin.SimilarList
	f.get(t, "/api/similar?q="+url.QueryEscape("upstream 503 service unavailable")+"&k=3", &sim)
	if len(sim.Memories) == 0 || sim.Memories[0].Similarity <= 0 {
		t.Errorf("similar: %+v", sim)
	}
	for _, c := range []struct{ q, field string }{{"", "q"}, {"q=x&k=0", "k"}, {"q=x&k=101", "k"}, {"q=" + strings.Repeat("x", 5000), "q"}} {
		code, b := f.do(t, "GET", "/api/similar?"+c.q, token, "", "")
		errorOf(t, "similar "+c.q, code, b, 400, c.field)
	}
}

// TestAuth is the matrix of tokens and options.
func TestAuth(t *testing.T) {
	type want struct{ read, metrics, mutate int }
	for _, c := range []struct {
		name string
		opts admin.Options
		tok  string
		want want
	}{
		{"no token configured", admin.Options{}, "", want{200, 200, 403}},
		{"no token configured, one sent", admin.Options{}, "anything", want{200, 200, 403}},
		{"token, none sent", admin.Options{Token: token}, "", want{401, 401, 401}},
		{"token, wrong", admin.Options{Token: token}, "wrong", want{403, 403, 403}},
		{"token, prefix of it", admin.Options{Token: token}, token[:5], want{403, 403, 403}},
		{"token, right", admin.Options{Token: token}, token, want{200, 200, 200}},
		{"open reads", admin.Options{Token: token, OpenReads: true}, "", want{200, 200, 401}},
		{"open metrics", admin.Options{Token: token, OpenMetrics: true}, "", want{401, 200, 401}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.opts)
			code, b := f.do(t, "GET", "/api/agents", c.tok, "", "")
			if code != c.want.read {
				t.Errorf("read: %d %s", code, b)
			}
			if code, _ := f.do(t, "GET", "/metrics", c.tok, "", ""); code != c.want.metrics {
				t.Errorf("metrics: %d", code)
			}
			code, b = f.do(t, "POST", "/api/agents/alpha/critical", c.tok, "application/json", `{"critical":true}`)
			if code != c.want.mutate {
				t.Errorf("mutate: %d %s", code, b)
			}
			if code != 200 {
				errorOf(t, "mutate", code, b, c.want.mutate, "")
				if c.opts.Token == "" && !strings.Contains(string(b), "no token configured") {
					t.Errorf("403 does not say why: %s", b)
				}
				if _, prof := f.l.Threshold("alpha"); prof == si.ProfileCritical {
					t.Error("a refused mutation was made")
				}
			}
		})
	}
}

// TestBadRequests: methods, content types, sizes, unknown paths.
func TestBadRequests(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token, MaxBodyBytes: 1024})
	for _, c := range []struct {
		method, path, ct, body string
		code                   int
	}{
		{"GET", "/api/agents/alpha/rewind", "", "", 405},
		{"DELETE", "/api/agents/alpha", "", "", 405},
		{"POST", "/api/agents", "application/json", "{}", 405},
		{"POST", "/api/agents/alpha/critical", "", `{"critical":true}`, 415},
		{"POST", "/api/agents/alpha/critical", "application/x-www-form-urlencoded", `critical=true`, 415},
		{"POST", "/api/agents/alpha/critical", "text/plain", `{"critical":true}`, 415},
		{"POST", "/api/agents/alpha/rewind", "application/json", `{"version":1,"reason":"` + strings.Repeat("x", 2000) + `"}`, 413},
		{"GET", "/api/nothing", "", "", 404},
		{"GET", "/nothing", "", "", 404},
	} {
		code, b := f.do(t, c.method, c.path, token, c.ct, c.body)
		errorOf(t, c.method+" "+c.path, code, b, c.code, "")
	}
	// JSON with parameters is JSON.
	if code, b := f.do(t, "POST", "/api/agents/alpha/critical", token, "application/json; charset=utf-8", `{"critical":false}`); code != 200 {
		t.Errorf("charset: %d %s", code, b)
	}
	h := admin.Handler(f.l, admin.Options{Dashboard: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dash")) })})
	rec := httptestGet(h, "/")
	if rec != "dash" {
		t.Errorf("Dashboard not served: %q", rec)
	}
}
