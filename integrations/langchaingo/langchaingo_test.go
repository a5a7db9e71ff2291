package langchaingo_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/langchaingo"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

// llm is langchaingo's OpenAI client at s, through the adapter's
// HTTPClient.
func llm(t *testing.T, s *oaifake.Server) *openai.LLM {
	t.Helper()
	m, err := openai.New(openai.WithToken("sk-test"), openai.WithBaseURL(s.URL+"/v1"), openai.WithModel("gpt-4o"),
		openai.WithHTTPClient(adapter.HTTPClient(nil)))
	if err != nil {
		t.Fatal(err)
	}
	return m
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

func wrap(t *testing.T, l *si.Loop, inner llms.Model, o adapter.Options) *adapter.Model {
	t.Helper()
	if o.AgentID == "" {
		o.AgentID = "a"
	}
	m, err := adapter.New(l, inner, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var hi = []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, "hi")}

// TestClassification: langchaingo flattens an HTTP error into "API
// returned unexpected status code: 429: <message>"; through HTTPClient,
// the error Model returns carries the status, the provider's code and
// the wait, and its class is the one the SDK adapters give.
func TestClassification(t *testing.T) {
	for _, c := range oaifake.Cases {
		t.Run(c.Name, func(t *testing.T) {
			s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return c.Reply })
			l := newLoop(t, si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}))
			_, err := wrap(t, l, llm(t, s), adapter.Options{}).GenerateContent(context.Background(), hi)
			var e *adapter.Error
			if !errors.As(err, &e) || e.Status != c.Reply.Status || e.Wait != c.Wait || failure.Classify(err) != c.Class {
				t.Fatalf("err %v (%#v): want status %d, class %s, wait %v", err, e, c.Reply.Status, c.Class, c.Wait)
			}
			if !strings.Contains(err.Error(), "langchaingo") || len(s.Requests()) != 1 {
				t.Errorf("%q after %d requests", err, len(s.Requests()))
			}
		})
	}
}

// TestRouteAndRetryAfter: Config.Route picks the model through the
// ladder; a 429's Retry-After is waited before the next attempt.
func TestRouteAndRetryAfter(t *testing.T) {
	s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
		if n == 1 {
			return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
		}
		return oaifake.OK("hi")
	})
	routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}, Models: map[string]string{"eu": "gpt-4o-eu"}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{Route: "eu", MaxAttempts: 2}))
	resp, err := wrap(t, l, llm(t, s), adapter.Options{Routes: routes}).GenerateContent(context.Background(), hi, llms.WithModel("ignored"))
	if err != nil || resp.Choices[0].Content != "hi" {
		t.Fatalf("%v, %+v", err, resp)
	}
	if got := s.Requests(); len(got) != 2 || got[0] != "gpt-4o-eu" || got[1] != "gpt-4o-eu" {
		t.Errorf("models requested: %q", got)
	}
	if gap := s.At()[1].Sub(s.At()[0]); gap < time.Second {
		t.Errorf("second request %v after the first, before the 1s the server asked", gap)
	}
}

// TestStormRespectsDeadline: a 429 asking for 10 s is not waited past
// the caller's deadline: the call returns at once.
func TestStormRespectsDeadline(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply {
		return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "10"})
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := wrap(t, l, llm(t, s), adapter.Options{}).GenerateContent(ctx, hi)
	if failure.Classify(err) != failure.ClassRateLimit || len(s.Requests()) != 1 || time.Since(start) > 300*time.Millisecond {
		t.Errorf("err %v, %d requests in %v; want 1 request, at once", err, len(s.Requests()), time.Since(start))
	}
}

// TestBadOutputRetried: an answer Check refuses fails the attempt as a
// bad output; the loop retries it at once, and the caller gets the good
// answer.
func TestBadOutputRetried(t *testing.T) {
	s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
		if n == 1 {
			return oaifake.OK(`{"answer": 4`)
		}
		return oaifake.OK(`{"answer": 42}`)
	})
	l := newLoop(t)
	check := func(r *llms.ContentResponse) error {
		var v struct{ Answer int }
		return json.Unmarshal([]byte(r.Choices[0].Content), &v)
	}
	start := time.Now()
	resp, err := wrap(t, l, llm(t, s), adapter.Options{Check: check}).GenerateContent(context.Background(), hi)
	if err != nil || resp.Choices[0].Content != `{"answer": 42}` || len(s.Requests()) != 2 || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("%v, %+v after %d requests in %v", err, resp, len(s.Requests()), time.Since(start))
	}
	cl := l.Clusters("a")
	if len(cl) != 0 || l.Stats("a").Failures != 0 {
		t.Errorf("a call retried to success counted as failed: %+v", cl)
	}
}

// TestAgentIDs: calls are booked under Options.AgentID, or the ID the
// context names.
func TestAgentIDs(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("hi") })
	l := newLoop(t)
	m := wrap(t, l, llm(t, s), adapter.Options{AgentID: "chain"})
	if _, err := m.Call(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GenerateContent(adapter.WithAgentID(context.Background(), "chain/plan"), hi); err != nil {
		t.Fatal(err)
	}
	if a, b := l.Stats("chain").Calls, l.Stats("chain/plan").Calls; a != 1 || b != 1 {
		t.Errorf("calls: chain %d, chain/plan %d", a, b)
	}
	if _, err := adapter.New(l, m, adapter.Options{}); !errors.Is(err, adapter.ErrNoAgentID) {
		t.Errorf("New without an AgentID: %v", err)
	}
}
