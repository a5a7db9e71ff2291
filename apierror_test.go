package selfimprove_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
)

func TestAPIError(t *testing.T) {
	sdk := errors.New("sdk error")
	long := strings.Repeat("é", 200) // 400 bytes
	tests := []struct {
		e    failure.APIError
		want string
	}{
		{failure.APIError{Provider: "openai", Status: 404, Code: "model_not_found", Type: "invalid_request_error", Message: "gone"},
			"openai: 404 model_not_found (invalid_request_error): gone"},
		{failure.APIError{Provider: "anthropic", Status: 429, Type: "rate_limit_error", Wait: 2 * time.Second, Message: "slow down"},
			"anthropic: 429 rate_limit_error, retry after 2s: slow down"},
		{failure.APIError{Provider: "go-openai", Status: 500, Code: "server_error", Message: "oops"}, "go-openai: 500 server_error: oops"},
		{failure.APIError{Provider: "openai", Status: 502, Message: long}, "openai: 502: " + strings.Repeat("é", 150) + "…"},
	}
	for _, tt := range tests {
		e := tt.e
		e.Err, e.Class = sdk, failure.ClassRateLimit
		if got := e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		var err error = &e
		if !errors.Is(err, sdk) || failure.Classify(err) != failure.ClassRateLimit || e.StatusCode() != tt.e.Status || e.RetryAfter() != tt.e.Wait {
			t.Errorf("%q: unwrap %v, class %s, status %d, wait %v", tt.want, errors.Is(err, sdk), failure.Classify(err), e.StatusCode(), e.RetryAfter())
		}
	}
}

func TestModelRoutes(t *testing.T) {
	r := si.Routes{Primary: "gpt-4.1", Models: map[string]string{"cheap": "gpt-4o-mini"}, Fallbacks: []string{"gpt-4o"}}
	for route, want := range map[string]string{"": "gpt-4.1", "cheap": "gpt-4o-mini", "o3": "o3"} {
		if got := r.Model(si.Config{Route: route}); got != want {
			t.Errorf("Model(%q) = %q, want %q", route, got, want)
		}
	}
	if got := (si.Routes{}).Model(si.Config{}); got != "" {
		t.Errorf("Model of the zero Routes = %q, want the function's own default", got)
	}
}
