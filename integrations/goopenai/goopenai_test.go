package goopenai_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	goai "github.com/sashabaranov/go-openai"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/goopenai"
)

// reply is one answer of the fake OpenAI server.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

func apiErr(status int, typ, code, msg string, headers map[string]string) reply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	if code == "" {
		b, _ = json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	}
	return reply{status, headers, string(b)}
}

const okBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`

var ok = reply{status: 200, body: okBody}

// server is a fake OpenAI API: answer picks the reply for a request's
// model and number; it notes when each request arrived.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	at     []time.Time
	models []string
	answer func(model string, n int) reply
}

func newServer(t *testing.T, answer func(model string, n int) reply) *server {
	s := &server{answer: answer}
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
		rep := s.answer(req.Model, n)
		if rep.status == 0 { // hang until the client leaves
			<-r.Context().Done()
			return
		}
		for k, v := range rep.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

func client(url string) *goai.Client {
	cfg := adapter.ClientConfig("sk-test", nil)
	cfg.BaseURL = url + "/v1"
	return goai.NewClientWithConfig(cfg)
}

func chat(ctx context.Context, c *goai.Client, model string) error {
	_, err := c.CreateChatCompletion(ctx, goai.ChatCompletionRequest{Model: model, Messages: []goai.ChatCompletionMessage{{Role: goai.ChatMessageRoleUser, Content: "hi"}}})
	return err
}

// The providers' error bodies and headers, as OpenAI sends them.
var cases = []struct {
	name  string
	reply reply
	want  failure.Class
	wait  time.Duration // from the message: go-openai's errors carry no headers
}{
	{"rate_limit_exceeded", apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
		map[string]string{"retry-after": "2", "x-ratelimit-reset-requests": "20s", "x-ratelimit-remaining-requests": "0"}), failure.ClassRateLimit, 20 * time.Second},
	{"rate_limit_exceeded reset only", apiErr(429, "tokens", "rate_limit_exceeded", "Rate limit reached for gpt-4o on tokens per min (TPM).",
		map[string]string{"x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "10"}), failure.ClassRateLimit, 0},
	{"rate_limit_exceeded retry-after-ms", apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after-ms": "1500"}), failure.ClassRateLimit, 0},
	{"insufficient_quota", apiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", nil), failure.ClassQuota, 0},
	{"server_error 500", apiErr(500, "server_error", "", "The server had an error while processing your request. Sorry about that!", nil), failure.ClassOverloaded, 0},
	{"server_error 503", apiErr(503, "server_error", "", "The server is overloaded or not ready yet.", map[string]string{"retry-after": "1"}), failure.ClassOverloaded, 0},
	{"model_not_found", apiErr(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` does not exist or you do not have access to it.", nil), failure.ClassModelUnavailable, 0},
	{"context_length_exceeded", apiErr(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130567 tokens. Please reduce the length of the messages.", nil), failure.ClassContextLength, 0},
	{"invalid_api_key", apiErr(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.", nil), failure.ClassAuth, 0},
	{"content_filter", apiErr(400, "invalid_request_error", "content_filter", "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.", nil), failure.ClassContentFilter, 0},
}

func TestClassification(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(string, int) reply { return c.reply })
			err := chat(context.Background(), client(s.URL), "gpt-4o")
			var ae *goai.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, not an *openai.Error", err)
			}
			if got := failure.Classify(err); got != c.want {
				t.Errorf("raw SDK error: Classify = %q, want %q", got, c.want)
			}
			w := adapter.Wrap(err)
			if got := failure.Classify(w); got != c.want {
				t.Errorf("wrapped: Classify = %q, want %q", got, c.want)
			}
			var e *adapter.Error
			if !errors.As(w, &e) || e.Wait != c.wait || e.Status != c.reply.status || !errors.As(w, &ae) {
				t.Errorf("wrapped: %#v, want wait %v", e, c.wait)
			}
			if s.requests() != 1 {
				t.Errorf("%d requests: the SDK retried on its own", s.requests())
			}
		})
	}
	t.Run("HTML from a proxy", func(t *testing.T) {
		s := newServer(t, func(string, int) reply { return reply{502, nil, "<html><body>502 Bad Gateway</body></html>"} })
		err := adapter.Wrap(chat(context.Background(), client(s.URL), "gpt-4o"))
		var e *adapter.Error
		var re *goai.RequestError
		if !errors.As(err, &e) || e.Status != 502 || !errors.As(err, &re) || failure.Classify(err) != failure.ClassOverloaded {
			t.Errorf("Wrap = %#v, class %q; want a 502, overloaded", err, failure.Classify(err))
		}
	})
	t.Run("client-side deadline", func(t *testing.T) {
		s := newServer(t, func(string, int) reply { return reply{} })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := adapter.Wrap(chat(ctx, client(s.URL), "gpt-4o"))
		if got := failure.Classify(err); got != failure.ClassTimeout {
			t.Errorf("Classify(%v) = %q, want timeout", err, got)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		err = adapter.Wrap(chat(context.Background(), client("http://"+addr), "gpt-4o"))
		if got := failure.Classify(err); got != failure.ClassNetwork {
			t.Errorf("Classify(%v) = %q, want network", err, got)
		}
	})
}

func newLoop(t *testing.T, opts ...si.Option) *si.Loop {
	t.Helper()
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.DiscardHandler))}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestPermanentErrorsSentOnce(t *testing.T) {
	for _, c := range cases {
		switch c.want {
		case failure.ClassRateLimit, failure.ClassOverloaded:
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(string, int) reply { return c.reply })
			l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
			cl := client(s.URL)
			rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, cfg si.Config) error {
				return adapter.Wrap(chat(ctx, cl, "gpt-4o"))
			})
			if err == nil || rep.Attempts != 1 || s.requests() != 1 {
				t.Errorf("err %v: %d attempts, %d requests; want 1", err, rep.Attempts, s.requests())
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	s := newServer(t, func(_ string, n int) reply {
		if n == 1 {
			return apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
		}
		return ok
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3, Backoff: 10 * time.Millisecond}))
	cl := client(s.URL)
	rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, cfg si.Config) error {
		return chat(ctx, cl, "gpt-4o") // raw SDK error: the transport reads the header
	})
	if err != nil || rep.Attempts != 2 || s.requests() != 2 {
		t.Fatalf("err %v, %d attempts, %d requests", err, rep.Attempts, s.requests())
	}
	if gap := s.at[1].Sub(s.at[0]); gap < time.Second {
		t.Errorf("second request %v after the first, before the 1s the server asked", gap)
	}
}

func TestStormRespectsDeadline(t *testing.T) {
	s := newServer(t, func(string, int) reply {
		return apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "10"})
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, cfg si.Config) error {
		return adapter.Wrap(chat(ctx, cl, "gpt-4o"))
	})
	if err == nil || rep.Attempts != 1 || s.requests() != 1 || time.Since(start) > 300*time.Millisecond {
		t.Errorf("err %v, %d attempts, %d requests in %v; want 1 request, at once", err, rep.Attempts, s.requests(), time.Since(start))
	}
}

func TestWithdrawnModelRecoveredByFallback(t *testing.T) {
	s := newServer(t, func(model string, _ int) reply {
		if model == "gpt-4-0314" {
			return apiErr(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` has been deprecated.", nil)
		}
		return ok
	})
	routes := si.Routes{Primary: "gpt-4-0314", Fallbacks: []string{"gpt-4o"}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	fn := func(ctx context.Context, cfg si.Config) error { return adapter.Wrap(chat(ctx, cl, routes.Model(cfg))) }
	okCalls := 0
	for i := range 20 {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", fn)
		if i >= 10 && rep.Success {
			okCalls++
		}
	}
	old := 0
	s.mu.Lock()
	for _, m := range s.models {
		if m == "gpt-4-0314" {
			old++
		}
	}
	s.mu.Unlock()
	if old != 1 {
		t.Errorf("%d requests to the withdrawn model, want 1: its call's next attempt, and every call after it, ran on the fallback", old)
	}
	if okCalls != 10 {
		t.Errorf("%d of the last 10 calls succeeded, want 10 (route %q)", okCalls, l.Config("a").Route)
	}
}
