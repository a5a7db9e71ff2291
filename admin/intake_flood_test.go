package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// batchOf is a batch of one success for each agent.
func batchOf(agents ...string) string {
	var b strings.Builder
	for i, id := range agents {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"agent": %q, "success": true, "duration_ms": 5, "config_version": 1}`, id)
	}
	return `{"outcomes": [` + b.String() + `]}`
}

// postRes posts body to the intake with tok, and returns the answer with
// its Retry-After.
func (f *fixture) postRes(t *testing.T, tok, body string) (int, []byte, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/si/api/outcomes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return res.StatusCode, []byte(readAll(res)), res.Header.Get("Retry-After")
}

// TestIntakeNewAgentFlood: at the default caps, a token creates at most
// 60 agents through the intake a minute (issue 42, finding 4: 200 new
// IDs evicted a real agent's state and filled the timelines); a batch
// over it gets 429 with Retry-After naming the limit and books nothing;
// agents the loop knows are still booked; each token has its bucket; the
// caps and refusals are in /metrics.
func TestIntakeNewAgentFlood(t *testing.T) {
	l, clk := newLoop(t)
	if err := l.SetConfig("py-real", si.Config{Timeout: 3 * time.Second}); err != nil { // an agent with history
		t.Fatal(err)
	}
	h := admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py-*"}, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	created, refused := 0, 0
	for b := range 20 { // 200 new IDs, in batches of 10
		ids := make([]string, 10)
		for i := range ids {
			ids[i] = fmt.Sprintf("py-flood-%03d", b*10+i)
		}
		code, body, after := f.postRes(t, intakeToken, batchOf(ids...))
		switch code {
		case 200:
			created += 10
		case 429:
			refused += 10
			errorOf(t, "batch "+strconv.Itoa(b), code, body, 429, "outcomes[0].agent")
			if n, _ := strconv.Atoi(after); n < 1 || n > 60 || !strings.Contains(string(body), "admin.Options.IntakeNewAgents (60 new agents a minute") {
				t.Errorf("batch %d: Retry-After %q, %s", b, after, body)
			}
		default:
			t.Fatalf("batch %d: %d %s", b, code, body)
		}
	}
	if created != 60 || refused != 140 {
		t.Errorf("created %d, refused %d; want 60 and 140", created, refused)
	}
	if n := len(l.History("py-flood-060")); n != 0 {
		t.Errorf("a refused agent exists: %d versions", n)
	}
	// Known agents are booked; the operator's token has its own bucket;
	// a minute refills the intake token's.
	for _, c := range []struct{ tok, body string }{
		{intakeToken, batchOf("py-real", "py-flood-000")},
		{token, batchOf("go-new")},
	} {
		if code, b, _ := f.postRes(t, c.tok, c.body); code != 200 {
			t.Errorf("%.40s: %d %s", c.body, code, b)
		}
	}
	clk.Advance(time.Minute)
	if code, b, _ := f.postRes(t, intakeToken, batchOf("py-later")); code != 200 {
		t.Errorf("a new agent a minute later: %d %s", code, b)
	}
	if v := l.Config("py-real").Version; v != 2 {
		t.Errorf("the agent with history: v%d", v)
	}
	_, m := f.do(t, "GET", "/metrics", token, "", "")
	for _, want := range []string{
		"selfimprove_intake_new_agents_per_minute 60\n",
		"selfimprove_intake_new_agents_total 62\n",
		`selfimprove_intake_refused_total{reason="new_agents"} 14` + "\n",
		"selfimprove_intake_outcomes_total 64\n",
		"selfimprove_intake_outcome_rate 1000\n",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestIntakeNewAgentsBurst: a batch naming more new agents than a bucket
// holds is refused at once, saying to send smaller batches.
func TestIntakeNewAgentsBurst(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, IntakeNewAgents: 2, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	code, b, after := f.postRes(t, token, batchOf("a", "b", "a", "c"))
	errorOf(t, "3 new agents, 2 at most", code, b, 429, "outcomes[3].agent")
	if after != "60" || !strings.Contains(string(b), "smaller batches") {
		t.Errorf("Retry-After %q: %s", after, b)
	}
	if code, b, _ := f.postRes(t, token, batchOf("a", "b", "a")); code != 200 {
		t.Errorf("2 new agents: %d %s", code, b)
	}
}

// TestTimelinesKeepHistory: once the timelines are full, an agent with
// history still gets one, in place of an agent that only reports made
// (finding 4: new IDs filled the timelines); an agent without history
// pushes out none.
func TestTimelinesKeepHistory(t *testing.T) {
	l, clk := newLoop(t)
	h := admin.Handler(l, admin.Options{Token: token, MaxTimelines: 3, SampleEvery: -1, IntakeNewAgents: 100, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	points := func(id string) int {
		var s admin.Series
		f.get(t, "/api/agents/"+id+"/series?range=hour", &s)
		return len(s.Points)
	}
	traffic(t, l, clk, "real", 5, 0)
	for i := range 5 {
		id := fmt.Sprintf("flood-%d", i)
		if code, b, _ := f.postRes(t, token, batchOf(id)); code != 200 {
			t.Fatalf("%s: %d %s", id, code, b)
		}
		points(id)
	}
	if err := l.SetConfig("real", si.Config{Timeout: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	traffic(t, l, clk, "real", 5, 0)
	if n := points("real"); n == 0 {
		t.Errorf("the agent with history has no timeline")
	}
	for i := 5; i < 10; i++ {
		id := fmt.Sprintf("flood-%d", i)
		f.postRes(t, token, batchOf(id))
		points(id)
	}
	if n := points("real"); n == 0 {
		t.Errorf("new agents pushed out the timeline of the agent with history")
	}
	if _, m := f.do(t, "GET", "/metrics", token, "", ""); !strings.Contains(string(m), "\nselfimprove_timelines 3\n") || !strings.Contains(string(m), "\nselfimprove_timelines_max 3\n") {
		t.Errorf("/metrics lacks the timelines:\n%s", m)
	}
}
