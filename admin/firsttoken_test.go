package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/stream"
)

// An agent's time to first token is in its detail and in /metrics; an
// operator sets the first-token timeout through the API.
func TestFirstToken(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	traffic(t, f.l, f.clk, "streamer", 1, 0) // the API changes known agents only
	code, b := f.post(t, "/api/agents/streamer/config", `{"config":{"timeout":"1m","first_token_timeout":"5s"}}`)
	if code != http.StatusOK {
		t.Fatalf("set config: %d %s", code, b)
	}
	if c := f.l.Config("streamer"); c.FirstTokenTimeout != 5*time.Second {
		t.Fatalf("config %+v", c)
	}
	for _, first := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond} {
		f.l.ExecuteWithImprovement(context.Background(), "streamer", func(ctx context.Context, _ si.Config) error {
			f.clk.Advance(first)
			stream.FirstToken(ctx)
			f.clk.Advance(3 * time.Second)
			return nil
		})
	}
	var d admin.AgentDetail
	f.get(t, "/api/agents/streamer", &d)
	// p90: rank 2.7 of 3, 0.85 of the way through the bucket (100, 250]
	// ms that holds the 2nd and 3rd.
	if want := (admin.FirstTokenView{Count: 3, Mean: 150 * time.Millisecond, P90: 227500 * time.Microsecond}); d.FirstToken != want {
		t.Errorf("first_token %+v, want %+v", d.FirstToken, want)
	}
	f.get(t, "/api/agents/alpha", &d)
	if d.FirstToken != (admin.FirstTokenView{}) {
		t.Errorf("alpha's first_token %+v, want none", d.FirstToken)
	}
	_, b = f.do(t, "GET", "/metrics", token, "", "")
	for _, want := range []string{
		"# TYPE selfimprove_first_token_seconds histogram\n",
		`selfimprove_first_token_seconds_bucket{agent="streamer",le="0.1"} 1` + "\n",
		`selfimprove_first_token_seconds_bucket{agent="streamer",le="0.25"} 3` + "\n",
		`selfimprove_first_token_seconds_bucket{agent="streamer",le="+Inf"} 3` + "\n",
		`selfimprove_first_token_seconds_sum{agent="streamer"} 0.45` + "\n",
		`selfimprove_first_token_seconds_count{agent="streamer"} 3` + "\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(b), `selfimprove_first_token_seconds_count{agent="alpha"}`) {
		t.Error("a first-token histogram for an agent that streams nothing")
	}
	// Summed under _other with agents that stream nothing.
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	admin.WriteMetrics(w, f.l, 1)
	w.Flush()
	if want := `selfimprove_first_token_seconds_bucket{agent="_other",le="0.25"} 3` + "\n"; !strings.Contains(buf.String(), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	for _, bad := range []string{`"-1s"`, `"2h"`, `"soon"`} {
		code, b := f.post(t, "/api/agents/streamer/config", `{"config":{"first_token_timeout":`+bad+`}}`)
		field := "config.first_token_timeout" // the body's check, and the loop's for "2h"
		errorOf(t, "first_token_timeout "+bad, code, b, http.StatusBadRequest, field)
	}
}
