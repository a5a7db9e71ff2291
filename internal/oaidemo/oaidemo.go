// Package oaidemo is the scaffolding the framework adapters' examples
// (integrations/{eino,genkit,langchaingo}/example) share: a fake OpenAI
// server with a scripted day (OldModel withdrawn after 5 requests, a 429
// with retry-after: 1, an answer that is not JSON), the script that
// drives an example's calls through it, and the check of its output.
package oaidemo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"
)

// The models of the script: OldModel is withdrawn after 5 requests, and
// the loop moves the agent to NewModel.
const (
	OldModel = "gpt-4-0314"
	NewModel = "gpt-4o"
)

// Server is a fake OpenAI server that answers chat completions as OpenAI
// does: OldModel is withdrawn after 5 requests; the request after the
// storm is set gets a 429 with retry-after: 1; the request after bad is
// set gets broken JSON. Close it when done.
type Server struct {
	*httptest.Server
	storm, bad atomic.Bool
	n          atomic.Int64
}

// NewServer starts a Server.
func NewServer() *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
	w.Header().Set("Content-Type", "application/json")
	content := `{\"answer\": 42}`
	switch {
	case req.Model == OldModel && s.n.Add(1) > 5:
		w.WriteHeader(404)
		io.WriteString(w, `{"error":{"message":"The model `+"`"+OldModel+"`"+` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations","type":"invalid_request_error","param":null,"code":"model_not_found"}}`)
		return
	case s.storm.CompareAndSwap(true, false):
		w.Header().Set("retry-after", "1")
		w.Header().Set("x-ratelimit-remaining-requests", "0")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"message":"Rate limit reached for `+NewModel+` in organization org-demo on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		return
	case s.bad.CompareAndSwap(true, false):
		content = `{\"answer\": 4`
	}
	io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"`+req.Model+`","choices":[{"index":0,"message":{"role":"assistant","content":"`+content+`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

// Script runs the day against s, writing to w what happens: ten asks
// through OldModel's withdrawal (each that fails noted as "  <noun> i:
// err"), the route the agent is on then, and an ask that meets a 429 and
// one that meets an answer that is not JSON, with the answer, the error
// and the time each took.
func (s *Server) Script(w io.Writer, noun string, ask func() (string, error), route func() string) {
	fmt.Fprintf(w, "model %s withdrawn after 5 requests:\n", OldModel)
	for i := 1; i <= 10; i++ {
		if _, err := ask(); err != nil {
			fmt.Fprintf(w, "  %s %2d: %v\n", noun, i, err)
		}
	}
	fmt.Fprintf(w, "  route now %q; every %s succeeded\n", route(), noun)
	for _, c := range []struct {
		what string
		flag *atomic.Bool
	}{{"a 429 with retry-after: 1", &s.storm}, {"an answer that is not JSON", &s.bad}} {
		c.flag.Store(true)
		start := time.Now()
		answer, err := ask()
		fmt.Fprintf(w, "%s: %q, error %v, after %v\n", c.what, answer, err, time.Since(start).Round(time.Second))
	}
}

// Check returns an error unless out, a Script's output, shows every ask
// succeeded, the agent on route, the 429 waited 1s and the bad answer
// retried at once.
func Check(out, noun, route string) error {
	var errs []error
	for _, want := range []string{
		`route now "` + route + `"`,
		`a 429 with retry-after: 1: "{\"answer\": 42}", error <nil>, after 1s`,
		`an answer that is not JSON: "{\"answer\": 42}", error <nil>, after 0s`,
	} {
		if !strings.Contains(out, want) {
			errs = append(errs, fmt.Errorf("output lacks %q", want))
		}
	}
	if strings.Contains(out, "  "+noun+" ") {
		errs = append(errs, fmt.Errorf("a %s failed", noun))
	}
	return errors.Join(errs...)
}
