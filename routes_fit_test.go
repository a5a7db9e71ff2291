package selfimprove_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// errTooLong is a provider's answer to a request over a model's window.
var errTooLong = errors.New(`400 Bad Request: {"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 12000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)

// errPrefill is Anthropic's answer to a prefill a model does not take.
var errPrefill = errors.New(`400 Bad Request: {"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`)

// capLadder is a ladder whose routes declare their limits: a small
// primary, a fallback that takes no prefill, and a large one.
var capLadder = si.Routes{Primary: "small", Fallbacks: []string{"noprefill", "large"},
	Limits: map[string]si.RouteLimits{
		"small":     {ContextTokens: 8_000},
		"noprefill": {ContextTokens: 200_000, NoPrefill: true},
		"large":     {ContextTokens: 1_000_000},
	}}

// asker records the routes asked; answer gives each route's answer.
type asker struct {
	asked  []string
	answer func(route string) error
}

func (a *asker) fn(_ context.Context, c si.Config) error {
	a.asked = append(a.asked, c.Route)
	return a.answer(c.Route)
}

// TestRequestGoesToARouteItFits: issue 40, item 4. A request over the
// primary's window goes straight to the first route that fits (its agent
// stays where it is: the primary is not counted as failing); a prefill
// never goes to a route that rejects it, not even as a fallback; without
// WithNeeds every route is asked as before.
func TestRequestGoesToARouteItFits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithRoutes(capLadder), si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
		defer l.Close()
		ok := &asker{answer: func(r string) error {
			if r == "" { // the primary
				return errTooLong
			}
			return nil
		}}
		big := si.WithNeeds(context.Background(), si.Needs{Tokens: 20_000})
		for range 20 {
			if _, err := l.ExecuteWithImprovement(big, "a", ok.fn); err != nil {
				t.Fatal(err)
			}
		}
		if want := slices.Repeat([]string{"noprefill"}, 20); !slices.Equal(ok.asked, want) {
			t.Errorf("a 20,000-token request asked %q; want the 200,000-token route at once, every time", ok.asked)
		}
		if cfg := l.Config("a"); cfg.Route != "" && cfg.Route != "small" || len(l.Changes("a")) != 0 {
			t.Errorf("the agent moved (route %q, %d changes): long requests are not the primary failing", cfg.Route, len(l.Changes("a")))
		}
		if d := l.DeadRoutes(); len(d) != 0 {
			t.Errorf("dead routes %v: a route too small for one request is not dead", d)
		}

		// A prefill, the primary overloaded: the last attempt falls back,
		// past the route that rejects prefill, to the large one.
		pre := &asker{answer: func(r string) error {
			switch r {
			case "": // the primary
				return errors.New("503 Service Unavailable: overloaded")
			case "noprefill":
				return errPrefill
			}
			return nil
		}}
		prefill := si.WithNeeds(context.Background(), si.Needs{Tokens: 1_000, Prefill: true})
		if _, err := l.ExecuteWithImprovement(prefill, "b", pre.fn); err != nil || slices.Contains(pre.asked, "noprefill") || pre.asked[len(pre.asked)-1] != "large" {
			t.Errorf("err %v, routes asked %q: the fallback that rejects prefill must never be asked", err, pre.asked)
		}

		// The same call without WithNeeds: every route may be asked.
		plain := &asker{answer: pre.answer}
		l.ExecuteWithImprovement(context.Background(), "c", plain.fn)
		if !slices.Contains(plain.asked, "noprefill") {
			t.Errorf("without WithNeeds, routes asked %q: want the ladder in order", plain.asked)
		}
	})
}

// TestContextLengthGoesToALargerWindow: a request the provider finds too
// long goes on to a route with a larger declared window, past one no
// larger and past another name for the same model, and ends at once with
// the provider's error when no route is left: never the same model twice.
func TestContextLengthGoesToALargerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ladder := si.Routes{Primary: "a8k", Fallbacks: []string{"alias", "b8k", "c128k"},
			Models: map[string]string{"alias": "a8k"},
			Limits: map[string]si.RouteLimits{"a8k": {ContextTokens: 8_192}, "b8k": {ContextTokens: 8_192}, "c128k": {ContextTokens: 128_000}}}
		l := looptest.NewLoop(t, si.WithRoutes(ladder))
		defer l.Close()
		long := &asker{answer: func(r string) error {
			if r == "c128k" {
				return nil
			}
			return errTooLong
		}}
		if _, err := l.ExecuteWithImprovement(context.Background(), "a", long.fn); err != nil || !slices.Equal(long.asked, []string{"", "c128k"}) {
			t.Errorf("err %v, routes asked %q; want the primary, then the 128k route", err, long.asked)
		}

		small := si.Routes{Primary: "a8k", Fallbacks: []string{"b4k"},
			Limits: map[string]si.RouteLimits{"a8k": {ContextTokens: 8_192}, "b4k": {ContextTokens: 4_096}}}
		if err := l.SetRoutes("b", small); err != nil {
			t.Fatal(err)
		}
		none := &asker{answer: func(string) error { return errTooLong }}
		_, err := l.ExecuteWithImprovement(context.Background(), "b", none.fn)
		if failure.Classify(err) != failure.ClassContextLength || len(none.asked) != 1 {
			t.Errorf("err %v, routes asked %q; want the provider's error after one attempt", err, none.asked)
		}
	})
}

// TestRouteLimitsValidated: a negative window is refused, naming the
// entry.
func TestRouteLimitsValidated(t *testing.T) {
	_, err := si.New(si.WithRoutes(si.Routes{Primary: "a", Limits: map[string]si.RouteLimits{"a": {ContextTokens: -1}}}))
	if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), `Limits["a"].ContextTokens`) {
		t.Errorf("New: %v; want ErrInvalidOption naming Limits[\"a\"].ContextTokens", err)
	}
}

// A ladder with an empty, duplicated or primary fallback is refused,
// naming the entry; before, New took it and dropped the entry silently.
func TestRouteLadderValidated(t *testing.T) {
	for _, tt := range []struct {
		r    si.Routes
		want string
	}{
		{si.Routes{Primary: "a", Fallbacks: []string{"b", ""}}, "Fallbacks[1]: empty"},
		{si.Routes{Primary: "a", Fallbacks: []string{"a", "b"}}, `Fallbacks[0]: "a" is the primary`},
		{si.Routes{Primary: "a", Fallbacks: []string{"b", "c", "b"}}, `Fallbacks[2]: "b" is listed twice`},
	} {
		_, err := si.New(si.WithStore(si.NewRAMStore()), si.WithRoutes(tt.r))
		if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with %+v: %v; want ErrInvalidOption naming %s", tt.r, err, tt.want)
		}
	}
}
