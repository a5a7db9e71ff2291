package genkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
)

// reply is one answer of the fake OpenAI server.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

// apiErr is OpenAI's error body, as the API sends it.
func apiErr(status int, typ, code, msg string, headers map[string]string) reply {
	var c any
	if code != "" {
		c = code
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
	return reply{status, headers, string(b)}
}

func okReply(content string) reply {
	b, _ := json.Marshal(content)
	return reply{status: 200, body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
		string(b) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`}
}

var ok = okReply("hi")

// server is a fake OpenAI API: answer picks the reply for a request's
// model and number; it notes the models and when each request came.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	at     []time.Time
	models []string
}

func newServer(t *testing.T, answer func(model string, n int) reply) *server {
	s := &server{}
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
		rep := answer(req.Model, n)
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

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}

// newGenkit is Genkit with its OpenAI-compatible plugin at url (models
// "openai/<name>"), through the adapter's ClientOptions over rt.
func newGenkit(url string, rt http.RoundTripper) *genkit.Genkit {
	return genkit.Init(context.Background(), genkit.WithPlugins(&compat_oai.OpenAICompatible{Provider: "openai", APIKey: "sk-test", BaseURL: url + "/v1",
		Opts: adapter.ClientOptions(rt)}))
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

func middleware(t *testing.T, l *si.Loop, o adapter.Options) ai.ModelMiddleware {
	t.Helper()
	if o.AgentID == "" {
		o.AgentID = "a"
	}
	mw, err := adapter.Middleware(l, o)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// generate is genkit.Generate on "openai/gpt-4o" with the prompt "hi"
// and mw, streaming to cb when not nil.
func generate(ctx context.Context, g *genkit.Genkit, mw ai.ModelMiddleware, cb ai.ModelStreamCallback) (string, error) {
	opts := []ai.GenerateOption{ai.WithModelName("openai/gpt-4o"), ai.WithPrompt("hi"), ai.WithMiddleware(mw)}
	if cb != nil {
		opts = append(opts, ai.WithStreaming(cb))
	}
	resp, err := genkit.Generate(ctx, g, opts...)
	if err != nil {
		return "", err
	}
	return resp.Text(), nil
}

// TestClassification: Genkit's OpenAI-compatible plugin returns
// openai-go's error wrapped in its own text; Wrap gives the status, the
// provider's code and the wait, and the class the SDK adapters give.
func TestClassification(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply reply
		want  failure.Class
		wait  time.Duration
	}{
		{"rate_limit_exceeded", apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
			map[string]string{"retry-after": "2", "x-ratelimit-reset-requests": "20s", "x-ratelimit-remaining-requests": "0"}), failure.ClassRateLimit, 2 * time.Second},
		{"insufficient_quota", apiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.", nil), failure.ClassQuota, 0},
		{"server_error 503", apiErr(503, "server_error", "", "The server is overloaded or not ready yet.", map[string]string{"retry-after": "1"}), failure.ClassOverloaded, time.Second},
		{"model_not_found", apiErr(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` does not exist or you do not have access to it.", nil), failure.ClassModelUnavailable, 0},
		{"context_length_exceeded", apiErr(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130567 tokens.", nil), failure.ClassContextLength, 0},
		{"invalid_api_key", apiErr(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-test.", nil), failure.ClassAuth, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(string, int) reply { return c.reply })
			l := newLoop(t, si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}))
			_, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), nil)
			var e *adapter.Error
			if !errors.As(err, &e) || e.Status != c.reply.status || e.Wait != c.wait || failure.Classify(err) != c.want {
				t.Fatalf("err %v (%#v): want status %d, class %s, wait %v", err, e, c.reply.status, c.want, c.wait)
			}
			if !strings.Contains(err.Error(), "genkit") || len(s.requests()) != 1 {
				t.Errorf("%q after %d requests", err, len(s.requests()))
			}
		})
	}
}

// TestRouteAndRetryAfter: Config.Route picks the model through the
// ladder, over the caller's; a 429's Retry-After is waited before the
// next attempt.
func TestRouteAndRetryAfter(t *testing.T) {
	s := newServer(t, func(_ string, n int) reply {
		if n == 1 {
			return apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
		}
		return ok
	})
	g := newGenkit(s.URL, nil)
	routes := si.Routes{Primary: "openai/gpt-4.1", Fallbacks: []string{"openai/gpt-4o"}, Models: map[string]string{"eu": "openai/gpt-4o-eu"}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{Route: "eu", MaxAttempts: 2}))
	text, err := generate(context.Background(), g, middleware(t, l, adapter.Options{Routes: routes, Genkit: g}), nil)
	if err != nil || text != "hi" {
		t.Fatalf("%v, %q", err, text)
	}
	if got := s.requests(); len(got) != 2 || got[0] != "gpt-4o-eu" || got[1] != "gpt-4o-eu" {
		t.Errorf("models requested: %q", got)
	}
	if gap := s.at[1].Sub(s.at[0]); gap < time.Second {
		t.Errorf("second request %v after the first, before the 1s the server asked", gap)
	}
}

// TestStormRespectsDeadline: a 429 asking for 10 s is not waited past
// the caller's deadline: the call returns at once, after one request
// (openai-go's own retries are off).
func TestStormRespectsDeadline(t *testing.T) {
	s := newServer(t, func(string, int) reply {
		return apiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "10"})
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := generate(ctx, newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), nil)
	if failure.Classify(err) != failure.ClassRateLimit || len(s.requests()) != 1 || time.Since(start) > 300*time.Millisecond {
		t.Errorf("err %v, %d requests in %v; want 1 request, at once", err, len(s.requests()), time.Since(start))
	}
}

// TestBadOutputRetried: an answer Check refuses fails the attempt as a
// bad output; the loop retries it at once, and the caller gets the good
// answer.
func TestBadOutputRetried(t *testing.T) {
	s := newServer(t, func(_ string, n int) reply {
		if n == 1 {
			return okReply(`{"answer": 4`)
		}
		return okReply(`{"answer": 42}`)
	})
	l := newLoop(t)
	check := func(r *ai.ModelResponse) error {
		var v struct{ Answer int }
		return json.Unmarshal([]byte(r.Text()), &v)
	}
	start := time.Now()
	text, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{Check: check}), nil)
	if err != nil || text != `{"answer": 42}` || len(s.requests()) != 2 || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("%v, %q after %d requests in %v", err, text, len(s.requests()), time.Since(start))
	}
	if cl := l.Clusters("a"); len(cl) != 0 || l.Stats("a").Failures != 0 {
		t.Errorf("a call retried to success counted as failed: %+v", cl)
	}
}

// TestAgentIDs: calls are booked under Options.AgentID, or the ID the
// context names; a route to a model Genkit lacks is an error.
func TestAgentIDs(t *testing.T) {
	s := newServer(t, func(string, int) reply { return ok })
	g := newGenkit(s.URL, nil)
	l := newLoop(t)
	mw := middleware(t, l, adapter.Options{AgentID: "flow"})
	if _, err := generate(context.Background(), g, mw, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := generate(adapter.WithAgentID(context.Background(), "flow/plan"), g, mw, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := l.Stats("flow").Calls, l.Stats("flow/plan").Calls; a != 1 || b != 1 {
		t.Errorf("calls: flow %d, flow/plan %d", a, b)
	}
	l2 := newLoop(t, si.WithDefaultConfig(si.Config{Route: "nowhere/model"}))
	if _, err := generate(context.Background(), g, middleware(t, l2, adapter.Options{}), nil); !errors.Is(err, adapter.ErrNoModel) {
		t.Errorf("a route to no model: %v", err)
	}
	if _, err := adapter.Middleware(l, adapter.Options{}); !errors.Is(err, adapter.ErrNoAgentID) {
		t.Errorf("Middleware without an AgentID: %v", err)
	}
}
