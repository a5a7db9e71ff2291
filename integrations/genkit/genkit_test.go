package genkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	adapter "github.com/self-improving-loop/selfimprove/integrations/genkit"
	"github.com/self-improving-loop/selfimprove/internal/oaifake"
)

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

func middleware(t *testing.T, l *si.Loop, o adapter.Options) ai.Middleware {
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
func generate(ctx context.Context, g *genkit.Genkit, mw ai.Middleware, cb ai.ModelStreamCallback) (string, error) {
	opts := []ai.GenerateOption{ai.WithModelName("openai/gpt-4o"), ai.WithPrompt("hi"), ai.WithUse(mw)}
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
	for _, c := range oaifake.Cases {
		t.Run(c.Name, func(t *testing.T) {
			s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return c.Reply })
			l := newLoop(t, si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}))
			_, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), nil)
			var e *adapter.Error
			if !errors.As(err, &e) || e.Status != c.Reply.Status || e.Wait != c.Wait || failure.Classify(err) != c.Class {
				t.Fatalf("err %v (%#v): want status %d, class %s, wait %v", err, e, c.Reply.Status, c.Class, c.Wait)
			}
			if !strings.Contains(err.Error(), "genkit") || len(s.Requests()) != 1 {
				t.Errorf("%q after %d requests", err, len(s.Requests()))
			}
		})
	}
}

// TestRouteAndRetryAfter: Config.Route picks the model through the
// ladder, over the caller's; a 429's Retry-After is waited before the
// next attempt.
func TestRouteAndRetryAfter(t *testing.T) {
	s := oaifake.NewServer(t, func(_ string, n int) oaifake.Reply {
		if n == 1 {
			return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "1"})
		}
		return oaifake.OK("hi")
	})
	g := newGenkit(s.URL, nil)
	routes := si.Routes{Primary: "openai/gpt-4.1", Fallbacks: []string{"openai/gpt-4o"}, Models: map[string]string{"eu": "openai/gpt-4o-eu"}}
	l := newLoop(t, si.WithRoutes(routes), si.WithDefaultConfig(si.Config{Route: "eu", MaxAttempts: 2}))
	text, err := generate(context.Background(), g, middleware(t, l, adapter.Options{Routes: routes, Genkit: g}), nil)
	if err != nil || text != "hi" {
		t.Fatalf("%v, %q", err, text)
	}
	if got := s.Requests(); len(got) != 2 || got[0] != "gpt-4o-eu" || got[1] != "gpt-4o-eu" {
		t.Errorf("models requested: %q", got)
	}
	if gap := s.At()[1].Sub(s.At()[0]); gap < time.Second {
		t.Errorf("second request %v after the first, before the 1s the server asked", gap)
	}
}

// TestStormRespectsDeadline: a 429 asking for 10 s is not waited past
// the caller's deadline: the call returns at once, after one request
// (openai-go's own retries are off).
func TestStormRespectsDeadline(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply {
		return oaifake.APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached.", map[string]string{"retry-after": "10"})
	})
	l := newLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := generate(ctx, newGenkit(s.URL, nil), middleware(t, l, adapter.Options{}), nil)
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
	check := func(r *ai.ModelResponse) error {
		var v struct{ Answer int }
		return json.Unmarshal([]byte(r.Text()), &v)
	}
	start := time.Now()
	text, err := generate(context.Background(), newGenkit(s.URL, nil), middleware(t, l, adapter.Options{Check: check}), nil)
	if err != nil || text != `{"answer": 42}` || len(s.Requests()) != 2 || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("%v, %q after %d requests in %v", err, text, len(s.Requests()), time.Since(start))
	}
	if cl := l.Clusters("a"); len(cl) != 0 || l.Stats("a").Failures != 0 {
		t.Errorf("a call retried to success counted as failed: %+v", cl)
	}
}

// TestAgentIDs: calls are booked under Options.AgentID, or the ID the
// context names; a route to a model Genkit lacks is an error.
func TestAgentIDs(t *testing.T) {
	s := oaifake.NewServer(t, func(string, int) oaifake.Reply { return oaifake.OK("hi") })
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
