// Package oaifake is test support for the framework adapters
// (integrations/eino, integrations/genkit, integrations/langchaingo): a
// fake OpenAI-compatible API on httptest that answers with the provider's
// exact bodies, headers and server-sent events, and the same bodies for
// the suites of internal/streamtest and internal/routesim.
package oaifake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Reply is one answer of the fake server.
type Reply struct {
	Status  int
	Headers map[string]string
	Body    string
}

// APIError is OpenAI's error body, as the API sends it (code "": null).
func APIError(status int, typ, code, msg string, headers map[string]string) Reply {
	var c any
	if code != "" {
		c = code
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
	return Reply{status, headers, string(b)}
}

// OK is OpenAI's chat completion whose answer is content.
func OK(content string) Reply {
	b, _ := json.Marshal(content)
	return Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
		string(b) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`}
}

// ModelNotFound is OpenAI's 404 for a model that does not exist.
func ModelNotFound(model string) Reply {
	return APIError(404, "invalid_request_error", "model_not_found", "The model `"+model+"` does not exist or you do not have access to it.", nil)
}

// Server is a fake OpenAI API: it notes the model and the time of each
// request.
type Server struct {
	*httptest.Server
	mu     sync.Mutex
	at     []time.Time
	models []string
}

// NewServer starts a Server, closed at the end of t: answer picks the
// reply for a request's model and number (from 1), sent as JSON.
func NewServer(t testing.TB, answer func(model string, n int) Reply) *Server {
	return start(t, func(w http.ResponseWriter, model string, n int) {
		rep := answer(model, n)
		for k, v := range rep.Headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		io.WriteString(w, rep.Body)
	})
}

// NewSSEServer starts a Server, closed at the end of t, that streams the
// events answer gives for a request's model and number (from 1), each
// followed by a blank line.
func NewSSEServer(t testing.TB, answer func(model string, n int) []string) *Server {
	return start(t, func(w http.ResponseWriter, model string, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range answer(model, n) {
			io.WriteString(w, ev+"\n\n")
		}
	})
}

func start(t testing.TB, write func(w http.ResponseWriter, model string, n int)) *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		json.Unmarshal(body, &req)
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.models = append(s.models, req.Model)
		n := len(s.at)
		s.mu.Unlock()
		write(w, req.Model, n)
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the model of each request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}

// At returns the time of each request so far.
func (s *Server) At() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// Cases are OpenAI's HTTP errors with the class and the wait the loop
// must read from each: the table of every adapter's TestClassification.
var Cases = []struct {
	Name  string
	Reply Reply
	Class failure.Class
	Wait  time.Duration
}{
	{"rate_limit_exceeded", APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
		map[string]string{"retry-after": "2", "x-ratelimit-reset-requests": "20s", "x-ratelimit-remaining-requests": "0"}), failure.ClassRateLimit, 2 * time.Second},
	{"insufficient_quota", APIError(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.", nil), failure.ClassQuota, 0},
	{"server_error 503", APIError(503, "server_error", "", "The server is overloaded or not ready yet.", map[string]string{"retry-after": "1"}), failure.ClassOverloaded, time.Second},
	{"model_not_found", APIError(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` does not exist or you do not have access to it.", nil), failure.ClassModelUnavailable, 0},
	{"context_length_exceeded", APIError(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130567 tokens.", nil), failure.ClassContextLength, 0},
	{"invalid_api_key", APIError(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-test.", nil), failure.ClassAuth, 0},
}

// join is a stream of events, each followed by a blank line.
func join(ev []string) string { return strings.Join(ev, "\n\n") + "\n\n" }
