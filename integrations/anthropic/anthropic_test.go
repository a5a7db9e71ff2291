package anthropic_test

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

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	adapter "github.com/self-improving-loop/selfimprove/integrations/anthropic"
)

// reply is one answer of the fake Anthropic server.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

func apiErr(status int, typ, msg string, headers map[string]string) reply {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	h := map[string]string{"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
	for k, v := range headers {
		h[k] = v
	}
	return reply{status, h, string(b)}
}

const okBody = `{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`

var ok = reply{status: 200, body: okBody}

// server is a fake Anthropic API: answer picks the reply for a request's
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

func client(url string) ant.Client {
	opts := append(adapter.ClientOptions(nil), option.WithAPIKey("sk-ant-test"), option.WithBaseURL(url+"/"))
	return ant.NewClient(opts...)
}

func chat(ctx context.Context, c ant.Client, model string) error {
	_, err := c.Messages.New(ctx, ant.MessageNewParams{Model: ant.Model(model), MaxTokens: 16,
		Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}})
	return err
}

// reset is an anthropic-ratelimit-*-reset time d from now.
func reset(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

// The providers' error bodies and headers, as Anthropic sends them.
var cases = []struct {
	name  string
	reply reply
	want  failure.Class
	wait  time.Duration // at least; within 2s above
}{
	{"overloaded_error 529", apiErr(529, "overloaded_error", "Overloaded", nil), failure.ClassOverloaded, 0},
	{"rate_limit_error", apiErr(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
		map[string]string{"retry-after": "2", "anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(20 * time.Second)}), failure.ClassRateLimit, 2 * time.Second},
	{"rate_limit_error reset only", apiErr(429, "rate_limit_error", "Number of requests has exceeded your per-minute rate limit",
		map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(30 * time.Second),
			"anthropic-ratelimit-tokens-remaining": "4000", "anthropic-ratelimit-tokens-reset": reset(50 * time.Second)}), failure.ClassRateLimit, 28 * time.Second},
	{"not_found_error model", apiErr(404, "not_found_error", "model: claude-2.0", nil), failure.ClassModelUnavailable, 0},
	{"not_found_error withdrawn model", apiErr(404, "not_found_error", "model: claude-3-sonnet-20240229", nil), failure.ClassModelUnavailable, 0},
	{"not_found_error other", apiErr(404, "not_found_error", "Not found", nil), failure.ClassNotFound, 0},
	{"invalid_request_error prompt too long", apiErr(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum", nil), failure.ClassContextLength, 0},
	{"invalid_request_error", apiErr(400, "invalid_request_error", "messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"user\" roles in a row", nil), failure.ClassBadRequest, 0},
	{"authentication_error", apiErr(401, "authentication_error", "invalid x-api-key", nil), failure.ClassAuth, 0},
	{"permission_error", apiErr(403, "permission_error", "Your API key does not have permission to use the specified resource.", nil), failure.ClassAuth, 0},
	{"api_error", apiErr(500, "api_error", "Internal server error", nil), failure.ClassOverloaded, 0},
	{"billing", apiErr(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", nil), failure.ClassQuota, 0},
}

func TestClassification(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(string, int) reply { return c.reply })
			err := chat(context.Background(), client(s.URL), "claude-sonnet-4-5")
			var ae *ant.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, not an *anthropic.Error", err)
			}
			if got := failure.Classify(err); got != c.want {
				t.Errorf("raw SDK error: Classify = %q, want %q", got, c.want)
			}
			w := adapter.Wrap(err)
			if got := failure.Classify(w); got != c.want {
				t.Errorf("wrapped: Classify = %q, want %q", got, c.want)
			}
			var e *adapter.Error
			if !errors.As(w, &e) || e.Wait < c.wait || e.Wait > c.wait+2*time.Second || (c.wait == 0 && e.Wait != 0) || e.Status != c.reply.status || !errors.As(w, &ae) {
				t.Errorf("wrapped: %#v, want wait %v", e, c.wait)
			}
			if s.requests() != 1 {
				t.Errorf("%d requests: the SDK retried on its own", s.requests())
			}
		})
	}
	t.Run("client-side deadline", func(t *testing.T) {
		s := newServer(t, func(string, int) reply { return reply{} })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := adapter.Wrap(chat(ctx, client(s.URL), "claude-sonnet-4-5"))
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
		err = adapter.Wrap(chat(context.Background(), client("http://"+addr), "claude-sonnet-4-5"))
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
				return adapter.Wrap(chat(ctx, cl, "claude-sonnet-4-5"))
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
			return apiErr(429, "rate_limit_error", "Number of requests has exceeded your per-minute rate limit", map[string]string{"retry-after": "1"})
		}
		return ok
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3, Backoff: 10 * time.Millisecond}))
	cl := client(s.URL)
	rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, cfg si.Config) error {
		return chat(ctx, cl, "claude-sonnet-4-5") // raw SDK error: the transport reads the header
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
		return apiErr(429, "rate_limit_error", "Number of requests has exceeded your per-minute rate limit", map[string]string{"retry-after": "10"})
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, cfg si.Config) error {
		return adapter.Wrap(chat(ctx, cl, "claude-sonnet-4-5"))
	})
	if err == nil || rep.Attempts != 1 || s.requests() != 1 || time.Since(start) > 300*time.Millisecond {
		t.Errorf("err %v, %d attempts, %d requests in %v; want 1 request, at once", err, rep.Attempts, s.requests(), time.Since(start))
	}
}

func TestWithdrawnModelRecoveredByFallback(t *testing.T) {
	s := newServer(t, func(model string, _ int) reply {
		if model == "claude-2.0" {
			return apiErr(404, "not_found_error", "model: claude-2.0", nil)
		}
		return ok
	})
	routes := si.Routes{Primary: "claude-2.0", Fallbacks: []string{"claude-sonnet-4-5"}}
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
		if m == "claude-2.0" {
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

// TestLargeMaxTokensWithoutStreamingNotRetried: anthropic-sdk-go refuses,
// before sending it, a non-streaming request whose max_tokens may take
// longer than 10 minutes; the call ends at its first attempt with that
// error, of class bad_request (the caller must stream, or lower
// max_tokens), and nothing reaches the server. Before: the refusal was
// other, and the loop retried it.
func TestLargeMaxTokensWithoutStreamingNotRetried(t *testing.T) {
	s := newServer(t, func(string, int) reply { return ok })
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	cl := client(s.URL)
	rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, cfg si.Config) error {
		_, err := cl.Messages.New(ctx, ant.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64000,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}})
		return adapter.Wrap(err)
	})
	if err == nil || rep.Attempts != 1 || s.requests() != 0 {
		t.Errorf("err %v: %d attempts, %d requests; want the SDK's refusal at the first attempt, no request", err, rep.Attempts, s.requests())
	}
	if got := failure.Classify(err); got != failure.ClassBadRequest {
		t.Errorf("Classify(%v) = %q, want %q", err, got, failure.ClassBadRequest)
	}
}
