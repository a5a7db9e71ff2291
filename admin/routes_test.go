package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/failure"
)

var (
	errQuota      = errors.New("429 insufficient_quota: You exceeded your current quota, please check your plan and billing details")
	errGone       = errors.New("404 model_not_found: the model `primary` does not exist")
	errBadRequest = errors.New("400 invalid_request_error: messages: unknown field")
)

// Issue 26, item 4: GET /api/agents/{agent} says what the loop will do
// next and when (next, next_at), the route an agent away from its
// primary returns to (home), the class it is held for (held), and the
// dead routes.
func TestAgentDetailNextStep(t *testing.T) {
	l, clk := newLoop(t, si.WithStrategy(&si.BuiltinStrategy{}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	calls := func(agent string, n int, gap time.Duration, up func(route string) error) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
				clk.Advance(100 * time.Millisecond)
				return up(cfg.Route)
			})
			clk.Advance(gap)
		}
	}
	start := clk.Now()
	calls("away", 40, 10*time.Second, func(r string) error {
		if (r == "" || r == "primary") && clk.Now().Before(start.Add(time.Hour)) {
			return errBoom
		}
		return nil
	})
	calls("gone", 3, time.Second, func(r string) error {
		if r == "" || r == "primary" {
			return errGone
		}
		return nil
	})
	calls("cooling", 30, 10*time.Second, func(string) error { return errBadRequest })
	calls("held", 3, time.Second, func(string) error { return errQuota })
	srv := httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, admin.Options{Token: token})))
	t.Cleanup(srv.Close)
	f := &fixture{l: l, clk: clk, srv: srv}
	now := clk.Now()
	detail := func(id string) admin.AgentDetail {
		var d admin.AgentDetail
		f.get(t, "/api/agents/"+id, &d)
		return d
	}
	if d := detail("held"); d.Held != failure.ClassQuota || !strings.HasPrefix(d.Next, "held for quota") || !d.NextAt.After(now) {
		t.Errorf("held: held %q, next %q at %v", d.Held, d.Next, d.NextAt)
	}
	if d := detail("away"); d.Home != "primary" || !strings.Contains(d.Next, `probe route "primary"`) || d.NextAt.Before(now) || d.Config.Route != "backup" {
		t.Errorf("away: route %q, home %q, next %q at %v", d.Config.Route, d.Home, d.Next, d.NextAt)
	}
	d := detail("cooling")
	if !strings.HasPrefix(d.Next, `cooling down; next: route "backup"`) || !d.NextAt.After(now) || d.Home != "" || d.Held != "" {
		t.Errorf("cooling: next %q at %v, home %q, held %q", d.Next, d.NextAt, d.Home, d.Held)
	}
	if len(d.DeadRoutes) != 1 || d.DeadRoutes[0].Route != "primary" || !d.DeadRoutes[0].Until.After(now.Add(23*time.Hour)) ||
		!strings.Contains(d.DeadRoutes[0].Reason, "model_not_found") {
		t.Errorf("dead routes %+v: want the primary, for a day", d.DeadRoutes)
	}
	// The JSON names the fields as docs/api.md does.
	_, b := f.do(t, "GET", "/api/agents/away", token, "", "")
	for _, k := range []string{`"next":`, `"next_at":`, `"home":"primary"`, `"dead_routes":[{"route":"primary"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("agent detail JSON lacks %s: %.600s", k, b)
		}
	}
}
