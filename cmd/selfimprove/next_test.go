package main

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
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 26, item 4: the agent command says what the loop will do next and
// when, and lists the dead routes: "Next: cooling down; next: route
// "backup"… (at 2026-03-01 18:15)".
func TestAgentNextStep(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet()),
		si.WithFlushInterval(0), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := func(agent string, n int, up func(route string) error) {
		for range n {
			l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
				clk.Advance(100 * time.Millisecond)
				return up(cfg.Route)
			})
			clk.Advance(10 * time.Second)
		}
	}
	start := clk.Now()
	calls("away", 40, func(r string) error {
		if (r == "" || r == "primary") && clk.Now().Before(start.Add(time.Hour)) {
			return errBoom
		}
		return nil
	})
	calls("cooling", 3, func(r string) error {
		if r == "" || r == "primary" {
			return errors.New("404 model_not_found: the model `primary` does not exist")
		}
		return nil
	})
	calls("cooling", 30, func(string) error { return errors.New("400 invalid_request_error: messages: unknown field") })
	srv := httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, admin.Options{Token: token, Logger: quiet()})))
	defer srv.Close()
	env := []string{"SELFIMPROVE_TOKEN=" + token}
	text := ok(t, env, nil, "agent", "cooling", "--url", srv.URL+"/si")
	for _, s := range []string{`Next:`, `cooling down; next: route "backup" if the current one keeps failing`, "(at 2026-03-01 ",
		"Dead route:", "primary until 2026-03-02 ", "model_not_found"} {
		if !strings.Contains(text, s) {
			t.Errorf("agent cooling: no %q in\n%s", s, text)
		}
	}
	text = ok(t, env, nil, "agent", "away", "--url", srv.URL+"/si")
	if !strings.Contains(text, `probe route "primary" to return to it (at 2026-03-01 `) {
		t.Errorf("agent away: no probe of the primary in\n%s", text)
	}
}
