package eino_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/eino"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

// chatModel is Eino's OpenAI model at url, through the adapter's
// HTTPClient over rt.
func chatModel(url string, rt http.RoundTripper) *openai.ChatModel {
	m, err := openai.NewChatModel(context.Background(), &openai.ChatModelConfig{APIKey: "sk-test", BaseURL: url + "/v1", Model: "gpt-4o",
		HTTPClient: adapter.HTTPClient(rt)})
	if err != nil {
		panic(err)
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

func wrap(t *testing.T, l *si.Loop, inner model.ToolCallingChatModel, o adapter.Options) *adapter.Model {
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

var hi = []*schema.Message{schema.UserMessage("hi")}

// TestClassification: Eino's OpenAI model flattens an HTTP error into
// "error, status code: 429, status: 429 Too Many Requests, message: …",
// dropping the Retry-After headers; through HTTPClient, the error Model
// returns carries the status, the provider's code and the wait, and its
// class is the one the SDK adapters give.
func TestClassification(t *testing.T) {
	for _, c := range oaifake.Cases {
		t.Run(c.Name, func(t *testing.T) {
			s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return c.Reply })
			l := newLoop(t, si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}))
			_, err := wrap(t, l, chatModel(s.URL, nil), adapter.Options{}).Generate(context.Background(), hi)
			var e *adapter.Error
			if !errors.As(err, &e) || e.Status != c.Reply.Status || e.Wait != c.Wait || failure.Classify(err) != c.Class {
				t.Fatalf("err %v (%#v): want status %d, class %s, wait %v", err, e, c.Reply.Status, c.Class, c.Wait)
			}
			if !strings.Contains(err.Error(), "eino") || len(s.Requests()) != 1 {
				t.Errorf("%q after %d requests", err, len(s.Requests()))
			}
		})
	}
}

// TestRouteAndRetryAfter: Config.Route picks the model through the
// ladder, over the inner model's own; a 429's Retry-After is waited
// before the next attempt.
func TestRouteAndRetryAfter(t *testing.T) {
	s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
		if n == 1 {
			return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
		}
		return oaifake.OK("hi")
	})
	routes := si.Routes{Primary: "gpt-4.1", Fallbacks: []string{"gpt-4o"}, Models: map[string]string{"eu": "gpt-4o-eu"}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{Route: "eu", MaxAttempts: 2}))
	msg, err := wrap(t, l, chatModel(s.URL, nil), adapter.Options{Routes: routes}).Generate(context.Background(), hi, model.WithModel("ignored"))
	if err != nil || msg.Content != "hi" {
		t.Fatalf("%v, %+v", err, msg)
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
	_, err := wrap(t, l, chatModel(s.URL, nil), adapter.Options{}).Generate(ctx, hi)
	if failure.Classify(err) != failure.ClassRateLimit || len(s.Requests()) != 1 || time.Since(start) > 300*time.Millisecond {
		t.Errorf("err %v, %d requests in %v; want 1 request, at once", err, len(s.Requests()), time.Since(start))
	}
}

// TestBadOutputRetried: an answer Check refuses fails the attempt as a
// bad output; the loop retries it at once, and the caller gets the good
// answer, from Generate and from Stream.
func TestBadOutputRetried(t *testing.T) {
	check := func(m *schema.Message) error {
		var v struct{ Answer int }
		return json.Unmarshal([]byte(m.Content), &v)
	}
	for _, streamed := range []bool{false, true} {
		var s *oaifake.Server
		if streamed {
			s = oaifake.NewSSEServer(t, func(_ string, n int) []string {
				if n == 1 {
					return oaifake.SSE(`{"answer": `, `4`)
				}
				return oaifake.SSE(`{"answer": `, `42}`)
			})
		} else {
			s = oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
				if n == 1 {
					return oaifake.OK(`{"answer": 4`)
				}
				return oaifake.OK(`{"answer": 42}`)
			})
		}
		l := newLoop(t)
		m := wrap(t, l, chatModel(s.URL, nil), adapter.Options{Check: check})
		start := time.Now()
		var msg *schema.Message
		var err error
		if streamed {
			msg, err = readAll(m.Stream(context.Background(), hi))
		} else {
			msg, err = m.Generate(context.Background(), hi)
		}
		if err != nil || msg.Content != `{"answer": 42}` || len(s.Requests()) != 2 || time.Since(start) > 300*time.Millisecond {
			t.Fatalf("stream %v: %v, %+v after %d requests in %v", streamed, err, msg, len(s.Requests()), time.Since(start))
		}
		if cl := l.Clusters("a"); len(cl) != 0 || l.Stats("a").Failures != 0 {
			t.Errorf("stream %v: a call retried to success counted as failed: %+v", streamed, cl)
		}
	}
}

// TestAgentIDs: calls are booked under Options.AgentID, or the ID the
// context names; a model with tools bound (WithTools, as an agent binds
// its tools) is wrapped as its parent.
func TestAgentIDs(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("hi") })
	l := newLoop(t)
	m := wrap(t, l, chatModel(s.URL, nil), adapter.Options{AgentID: "agent"})
	if _, err := m.Generate(context.Background(), hi); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(adapter.WithAgentID(context.Background(), "agent/plan"), hi); err != nil {
		t.Fatal(err)
	}
	tm, err := m.WithTools([]*schema.ToolInfo{{Name: "search", Desc: "searches"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Generate(context.Background(), hi); err != nil {
		t.Fatal(err)
	}
	if a, b := l.Stats("agent").Calls, l.Stats("agent/plan").Calls; a != 2 || b != 1 {
		t.Errorf("calls: agent %d, agent/plan %d", a, b)
	}
	if _, ok := tm.(*adapter.Model); !ok || m.IsCallbacksEnabled() || m.GetType() != "OpenAI" {
		t.Errorf("WithTools gave %T; callbacks %v, type %q", tm, m.IsCallbacksEnabled(), m.GetType())
	}
	if _, err := adapter.New(l, m, adapter.Options{}); !errors.Is(err, adapter.ErrNoAgentID) {
		t.Errorf("New without an AgentID: %v", err)
	}
}
