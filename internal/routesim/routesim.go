// Package routesim runs the route scenarios of
// docs/performance.md#routes with a real SDK client: the client calls a
// local server through a simulated network that moves a fake clock by
// each answer's latency, through the loop with a route ladder and through
// a baseline router that behaves like LiteLLM Router, and the two are
// compared. A script says, for each request, by model and time, what kind
// of answer the provider gives and how long it takes; hours of traffic
// run in seconds.
//
// It knows no SDK: each SDK's test fills in an SDK (how to build a client
// through the simulated network, how to make one call on a model, and
// which bodies and headers each kind of answer has) and calls Run.
package routesim

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Kind is a kind of answer of the provider; the SDK's Reply gives its
// status, headers and body.
type Kind int

// The kinds of answer the scenarios script.
const (
	// OK is a completion.
	OK Kind = iota
	// Overloaded is the provider overloaded (OpenAI: 503 server_error;
	// Anthropic: 529 overloaded_error).
	Overloaded
	// ServerError is a server error of the kind a healthy provider sends
	// now and then (OpenAI: 503 server_error; Anthropic: 500 api_error).
	ServerError
	// Withdrawn is a model the provider no longer serves (a 404).
	Withdrawn
	// NoQuota is an account out of quota or credit.
	NoQuota
	// RateLimited is a rate limit (a 429) that asks for 2 seconds with
	// retry-after: 2.
	RateLimited
	// RateLimitedNoWait is a rate limit (a 429) with no Retry-After.
	RateLimitedNoWait
	// ContextLength is a request over the model's context window (a 400).
	ContextLength
	// ContentFilter is a request or answer the provider's content filter
	// refused (a 400).
	ContentFilter
	// PrefillRefused is a model that does not take a prefill (a 400).
	PrefillRefused
)

// Reply is one HTTP answer of the provider.
type Reply struct {
	// Status is the HTTP status.
	Status int
	// Header holds the response's headers, by name.
	Header map[string]string
	// Body is the response's JSON body.
	Body string
}

// Call makes one call on model with an SDK's client, and returns nil or
// the error the adapter's Wrap returns. The request must carry ctx.
type Call func(ctx context.Context, model string) error

// SDK is what the scenarios need of one SDK.
type SDK struct {
	// Ladder is the route ladder: a primary and one fallback.
	Ladder si.Routes
	// Withdrawn names a model the provider has withdrawn.
	Withdrawn string
	// ServerError is how scenario names call a ServerError answer
	// ("503").
	ServerError string
	// Client returns a Call through a client of the SDK whose HTTP
	// transport is the adapter's over rt (the simulated network), with
	// the SDK's own retries off, at the server whose root URL is url
	// ("http://127.0.0.1:port"), with API key key.
	Client func(rt http.RoundTripper, url, key string) Call
	// Reply is the provider's answer of kind k to a request for model
	// at simulated time now.
	Reply func(k Kind, model string, now time.Time) Reply
	// Stream is the SDK's streaming, for the fault suite (RunFaults).
	Stream Stream
}

// Run runs the eight scenarios with sdk, each a subtest named after it
// (OverloadedPrimary, WithdrawnPrimary, QuotaExhausted, SlowPrimary,
// 429Storm, HealthyNoise, and issue 40's SilentPrimary and ShortOutage),
// then logs the side-by-side table of those
// that ran (docs/performance.md#routes); with SI_ROUTE_TABLE set, it
// writes the table to that file as well.
//
// The scenarios run in parallel (each has its own clock, server and
// Loops), which halves their time on two cores; the table keeps their
// order.
//
// Under the race detector, the three long ones (WithdrawnPrimary,
// QuotaExhausted, HealthyNoise: 8,640 to 34,560 calls each, through the
// loop and the baseline) skip, saying so: they exercise no concurrency
// the five others do not, and took 70 % of an SDK's test time under
// -race (about 4 times their time without it). .ci/run runs all eight
// without -race in a step of their own.
func Run(t *testing.T, sdk SDK) {
	s := &sim{sdk: sdk, rows: map[string]string{}}
	scs := []struct {
		name string
		run  func(*testing.T)
	}{
		{"OverloadedPrimary", s.overloadedPrimary}, {"WithdrawnPrimary", s.withdrawnPrimary},
		{"QuotaExhausted", s.quotaExhausted}, {"SlowPrimary", s.slowPrimary},
		{"429Storm", s.rateLimitStorm}, {"HealthyNoise", s.healthyNoise},
		{"SilentPrimary", s.silentPrimary}, {"ShortOutage", s.shortOutage},
	}
	t.Run("all", func(t *testing.T) {
		for _, sc := range scs {
			t.Run(sc.name, func(t *testing.T) {
				if raceOn && longScenarios[sc.name] {
					t.Skip("a long scenario: it runs without -race (go test -run TestScenarios; .ci/run runs it so)")
				}
				t.Parallel()
				sc.run(t)
			})
		}
	})
	for _, sc := range scs {
		s.order = append(s.order, "all/"+sc.name)
	}
	s.table(t)
}

// longScenarios are the scenarios Run skips under the race detector.
var longScenarios = map[string]bool{"WithdrawnPrimary": true, "QuotaExhausted": true, "HealthyNoise": true}

// sim runs the scenarios with one SDK and collects their table.
type sim struct {
	sdk   SDK
	mu    sync.Mutex
	rows  map[string]string // by the subtest's name below Run's test
	order []string          // the subtests' names, in the table's order
}

// tableHead is the table's heading.
const tableHead = "| scenario | selfimprove success | baseline success | selfimprove requests/call | baseline requests/call | selfimprove slowest answer | baseline slowest answer |\n|---|---|---|---|---|---|---|\n"

// table logs the table of the scenarios that ran, and writes it to the
// file SI_ROUTE_TABLE names, if any.
func (s *sim) table(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []string
	for _, n := range s.order {
		if r, ok := s.rows[n]; ok {
			rows = append(rows, r)
		}
	}
	out := tableHead + strings.Join(rows, "\n") + "\n"
	t.Log("\n" + out)
	if f := os.Getenv("SI_ROUTE_TABLE"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
