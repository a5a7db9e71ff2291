package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// Issue 26, item 4: the agent command says what the loop will do next and
// when, and lists the dead routes: "Next: cooling down; next: route
// "backup"… (at 2026-03-01 18:15)".
func TestAgentNextStep(t *testing.T) {
	l, _ := looptest.NextStepLoop(t)
	srv := httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, admin.Options{Token: token, Logger: quiet()})))
	defer srv.Close()
	env := []string{"SELFIMPROVE_TOKEN=" + token}
	text := ok(t, env, nil, "agent", "cooling", "--url", srv.URL+"/si")
	for _, s := range []string{`Next:`, `cooling down; next: the strategy, when failures cross the threshold`, "(at 2026-03-01 ",
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
