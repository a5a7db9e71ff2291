package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
)

// sdkErr is shaped like the errors of the Stainless-generated SDKs
// (openai-go, anthropic-sdk-go): a short text, the status in a field, the
// provider's body behind RawJSON.
type sdkErr struct {
	text string
	raw  string
}

func (e *sdkErr) Error() string   { return e.text }
func (e *sdkErr) RawJSON() string { return e.raw }

// openaiErr is openai-go's error: its text names the status only, and its
// RawJSON is the body's inner "error" object.
func openaiErr(status int, typ, code, msg string) error {
	return &sdkErr{fmt.Sprintf("OpenAI API error: %d %s", status, http.StatusText(status)),
		fmt.Sprintf(`{"message":%q,"type":%q,"param":null,"code":%q}`, msg, typ, code)}
}

// anthropicErr is anthropic-sdk-go's error: method, URL, status, then the
// whole body.
func anthropicErr(status int, typ, msg string) error {
	body := fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
	return &sdkErr{fmt.Sprintf(`POST "https://api.anthropic.com/v1/messages": %d %s %s`, status, http.StatusText(status), body), body}
}

func TestClassifyProviderBodies(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want failure.Class
	}{
		{"openai rate_limit_exceeded", openaiErr(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms."), failure.ClassRateLimit},
		{"openai insufficient_quota", openaiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."), failure.ClassQuota},
		{"openai server_error 500", openaiErr(500, "server_error", "", "The server had an error while processing your request. Sorry about that!"), failure.ClassOverloaded},
		{"openai 503 overloaded", openaiErr(503, "server_error", "", "The server is overloaded or not ready yet."), failure.ClassOverloaded},
		{"openai model_not_found", openaiErr(404, "invalid_request_error", "model_not_found", "The model `gpt-4-0314` does not exist or you do not have access to it."), failure.ClassModelUnavailable},
		{"openai context_length_exceeded", openaiErr(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."), failure.ClassContextLength},
		{"openai invalid_api_key", openaiErr(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys."), failure.ClassAuth},
		{"openai content_filter", openaiErr(400, "invalid_request_error", "content_filter", "The response was filtered due to the prompt triggering content management policy."), failure.ClassContentFilter},
		{"openai plain 404", openaiErr(404, "invalid_request_error", "", "Unknown request URL: POST /v1/chat/completion."), failure.ClassNotFound},
		{"openai plain 400", openaiErr(400, "invalid_request_error", "", "'messages' is a required property"), failure.ClassBadRequest},
		{"anthropic overloaded 529", anthropicErr(529, "overloaded_error", "Overloaded"), failure.ClassOverloaded},
		{"anthropic rate_limit_error", anthropicErr(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"), failure.ClassRateLimit},
		{"anthropic not_found model", anthropicErr(404, "not_found_error", "model: claude-2.0"), failure.ClassModelUnavailable},
		{"anthropic prompt too long", anthropicErr(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"), failure.ClassContextLength},
		{"anthropic authentication_error", anthropicErr(401, "authentication_error", "invalid x-api-key"), failure.ClassAuth},
		{"anthropic api_error", anthropicErr(500, "api_error", "Internal server error"), failure.ClassOverloaded},
		{"anthropic credit", anthropicErr(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API."), failure.ClassQuota},
		{"wrapped", fmt.Errorf("agent: %w", openaiErr(404, "invalid_request_error", "model_not_found", "gone")), failure.ClassModelUnavailable},
		{"not JSON", &sdkErr{"OpenAI API error: 404 Not Found", "<html>"}, failure.ClassNotFound},
		{"FailureClass wins", fmt.Errorf("%w", errors.Join(classed{failure.ClassTimeout}, openaiErr(404, "", "model_not_found", ""))), failure.ClassTimeout},
	}
	for _, c := range cases {
		if got := failure.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify = %q, want %q", c.name, got, c.want)
		}
	}
}

type classed struct{ c failure.Class }

func (e classed) Error() string               { return "classed" }
func (e classed) FailureClass() failure.Class { return e.c }

func TestProviderErrorOf(t *testing.T) {
	p, ok := failure.ProviderErrorOf(fmt.Errorf("x: %w", anthropicErr(529, "overloaded_error", "Overloaded")))
	if !ok || p != (failure.ProviderError{Type: "overloaded_error", Message: "Overloaded"}) {
		t.Errorf("anthropic: %+v %v", p, ok)
	}
	p, ok = failure.ProviderErrorOf(openaiErr(404, "invalid_request_error", "model_not_found", "gone"))
	if !ok || p != (failure.ProviderError{Code: "model_not_found", Type: "invalid_request_error", Message: "gone"}) {
		t.Errorf("openai: %+v %v", p, ok)
	}
	if _, ok := failure.ProviderErrorOf(&sdkErr{"x", `{"error":` + strings.Repeat(" ", 70<<10) + `"big"}`}); ok {
		t.Error("a body over 64 KiB was read")
	}
	if _, ok := failure.ProviderErrorOf(errors.New("plain")); ok {
		t.Error("plain error has a provider body")
	}
}

func TestHeaderWait(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := func(kv ...string) http.Header {
		x := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			x.Set(kv[i], kv[i+1])
		}
		return x
	}
	cases := []struct {
		name   string
		h      http.Header
		status int
		want   time.Duration
		why    string
	}{
		{"retry-after-ms", h("retry-after-ms", "1500", "retry-after", "9"), 429, 1500 * time.Millisecond, "retry-after-ms"},
		{"retry-after seconds", h("retry-after", "2"), 503, 2 * time.Second, "retry-after"},
		{"retry-after date", h("retry-after", now.Add(30*time.Second).Format(http.TimeFormat)), 429, 30 * time.Second, "retry-after"},
		{"retry-after date past", h("retry-after", now.Add(-time.Minute).Format(http.TimeFormat)), 429, 0, ""},
		{"retry-after garbage", h("retry-after", "soon"), 500, 0, ""},
		{"openai reset requests", h("x-ratelimit-reset-requests", "6m0s", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-tokens", "1s", "x-ratelimit-remaining-tokens", "100"), 429, 6 * time.Minute, "x-ratelimit-reset-requests"},
		{"openai reset tokens", h("x-ratelimit-reset-requests", "20ms", "x-ratelimit-reset-tokens", "1.5s"), 429, 1500 * time.Millisecond, "x-ratelimit-reset-tokens"},
		{"reset on a 500 ignored", h("x-ratelimit-reset-requests", "6m0s"), 500, 0, ""},
		{"anthropic reset", h("anthropic-ratelimit-requests-reset", now.Add(12*time.Second).Format(time.RFC3339), "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-tokens-reset", now.Add(40*time.Second).Format(time.RFC3339), "anthropic-ratelimit-tokens-remaining", "5000"), 429, 12 * time.Second, "anthropic-ratelimit-requests-reset"},
		{"more than a day", h("retry-after", "100000"), 429, 0, ""},
		{"none", h(), 429, 0, ""},
	}
	for _, c := range cases {
		d, why := failure.HeaderWait(c.h, c.status, now)
		if d != c.want || why != c.why {
			t.Errorf("%s: HeaderWait = %v %q, want %v %q", c.name, d, why, c.want, c.why)
		}
	}
}

func TestTextWait(t *testing.T) {
	cases := []struct {
		text string
		want time.Duration
	}{
		{"Rate limit reached for gpt-4o. Please try again in 1.898s. Visit https://x", 1898 * time.Millisecond},
		{"Please try again in 20ms.", 20 * time.Millisecond},
		{"Please try again in 6m0s.", 6 * time.Minute},
		{"rate limited (retry after 2s)", 2 * time.Second},
		{"Please retry after 3 seconds", 3 * time.Second},
		{"please wait 500 milliseconds", 500 * time.Millisecond},
		{"try again in a moment", 0},
		{"try again in 7 apples", 0},
		{"nothing here", 0},
	}
	for _, c := range cases {
		if got := failure.TextWait(c.text); got != c.want {
			t.Errorf("TextWait(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// retryAfterErr is an error with a RetryAfter method, as notifiers and
// adapters return.
type retryAfterErr struct{ d time.Duration }

func (e retryAfterErr) Error() string             { return "429 too many requests" }
func (e retryAfterErr) RetryAfter() time.Duration { return e.d }

func TestPermanentFailuresAreNotRetried(t *testing.T) {
	cfg := si.Config{MaxAttempts: 3}
	cases := []struct {
		name     string
		err      error
		opts     []si.Option
		attempts int
	}{
		{"auth", openaiErr(401, "invalid_request_error", "invalid_api_key", "bad key"), nil, 1},
		{"context length", anthropicErr(400, "invalid_request_error", "prompt is too long: 9 tokens > 8 maximum"), nil, 1},
		{"model withdrawn", openaiErr(404, "invalid_request_error", "model_not_found", "gone"), nil, 1},
		{"content filter", openaiErr(400, "invalid_request_error", "content_filter", "filtered"), nil, 1},
		{"quota", openaiErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota"), nil, 1},
		{"bad request", errors.New("400 bad request"), nil, 1},
		{"not found", errors.New("404 not found"), nil, 1},
		{"rate limit", openaiErr(429, "requests", "rate_limit_exceeded", "slow down"), nil, 3},
		{"overloaded", anthropicErr(529, "overloaded_error", "Overloaded"), nil, 3},
		{"timeout", context.DeadlineExceeded, nil, 3},
		{"network", io.ErrUnexpectedEOF, nil, 3},
		{"empty", errors.New("empty response"), nil, 3},
		{"other", errors.New("boom"), nil, 3},
		{"auth, every class retried", openaiErr(401, "", "invalid_api_key", ""), []si.Option{si.WithRetryPolicy(si.RetryPolicy{Permanent: []failure.Class{}})}, 3},
		{"timeout made permanent", context.DeadlineExceeded, []si.Option{si.WithRetryPolicy(si.RetryPolicy{Permanent: []failure.Class{failure.ClassTimeout}})}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := si.New(append([]si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithDefaultConfig(cfg)}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			n := 0
			rep, got := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { n++; return c.err })
			if got != c.err || rep.Attempts != c.attempts || n != c.attempts {
				t.Errorf("err %v, attempts %d (fn ran %d times), want %d", got, rep.Attempts, n, c.attempts)
			}
		})
	}
}

func TestRetryPolicyValidated(t *testing.T) {
	for _, p := range []si.RetryPolicy{{MaxWait: -1}, {Permanent: []failure.Class{""}}} {
		if _, err := si.New(si.WithStore(si.NewRAMStore()), si.WithRetryPolicy(p)); !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRetryPolicy") {
			t.Errorf("%+v: err = %v", p, err)
		}
	}
}

// attempts records the Attempt each try of a call was given.
type attempts struct {
	mu  sync.Mutex
	got []si.Attempt
}

func (a *attempts) fn(errs ...error) func(ctx context.Context, _ si.Config) error {
	return func(ctx context.Context, _ si.Config) error {
		at, _ := si.AttemptInfo(ctx)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.got = append(a.got, at)
		return errs[min(len(a.got)-1, len(errs)-1)]
	}
}

func TestServerWaitFromError(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		err    error
		policy si.RetryPolicy
		cfg    si.Config
		wait   time.Duration
		why    string
	}{
		{"RetryAfter method", fmt.Errorf("call: %w", retryAfterErr{5 * time.Second}), si.RetryPolicy{}, si.Config{MaxAttempts: 2}, 5 * time.Second, failure.WaitErrorMethod},
		{"provider message", openaiErr(429, "tokens", "rate_limit_exceeded", "Please try again in 1.5s."), si.RetryPolicy{}, si.Config{MaxAttempts: 2}, 1500 * time.Millisecond, failure.WaitProviderMessage},
		{"capped by MaxWait", retryAfterErr{time.Hour}, si.RetryPolicy{MaxWait: 2 * time.Second}, si.Config{MaxAttempts: 2}, 2 * time.Second, failure.WaitErrorMethod},
		{"ignored", retryAfterErr{time.Hour}, si.RetryPolicy{IgnoreServerWait: true}, si.Config{MaxAttempts: 2}, -2, failure.WaitBackoff},
		{"backoff longer", retryAfterErr{time.Millisecond}, si.RetryPolicy{}, si.Config{MaxAttempts: 2, Backoff: 2 * time.Minute}, -1, failure.WaitBackoff},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := fakeclock.New(t0)
			c.policy.TransientAttempts = 1
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithClock(clk),
				si.WithDefaultConfig(c.cfg), si.WithRetryPolicy(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var a attempts
			rep, _ := l.ExecuteWithImprovement(context.Background(), "a", a.fn(c.err))
			if rep.Attempts != 2 || len(a.got) != 2 {
				t.Fatalf("attempts = %d", rep.Attempts)
			}
			got := a.got[1]
			// -1: the config's back-off, -2: the SDKs' (0.25 to 0.5 s).
			if got.WaitReason != c.why || (c.wait >= 0 && got.Waited != c.wait) || (c.wait == -1 && got.Waited < time.Minute) ||
				(c.wait == -2 && (got.Waited < 250*time.Millisecond || got.Waited > 500*time.Millisecond)) {
				t.Errorf("waited %v (%q), want %v (%q)", got.Waited, got.WaitReason, c.wait, c.why)
			}
			if slept := clk.Now().Sub(t0); slept != got.Waited {
				t.Errorf("the clock moved %v, the Attempt says %v", slept, got.Waited)
			}
		})
	}
}

// fakeRT answers each request with the next response of a script, and
// notes when each arrived.
type fakeRT struct {
	mu    sync.Mutex
	resps []func() *http.Response
	at    []time.Time
}

func (f *fakeRT) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Now())
	r := f.resps[min(len(f.at)-1, len(f.resps)-1)]()
	r.Request = req
	return r, nil
}

func resp(status int, kv ...string) func() *http.Response {
	return func() *http.Response {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("{}"))}
	}
}

// get is a wrapped function that makes one request through client and
// fails on a status of 400 or more, as an SDK does.
func get(client *http.Client) func(ctx context.Context, _ si.Config) error {
	return func(ctx context.Context, _ si.Config) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://llm.invalid/v1/chat", nil)
		r, err := client.Do(req)
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode >= 400 {
			return fmt.Errorf("status %d", r.StatusCode)
		}
		return nil
	}
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3, Backoff: 10 * time.Millisecond}))
		defer l.Close()
		rt := &fakeRT{resps: []func() *http.Response{resp(429, "retry-after", "2"), resp(503, "retry-after-ms", "300"), resp(200)}}
		client := &http.Client{Transport: si.Transport(rt)}
		var a attempts
		fn := get(client)
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			a.fn(nil)(ctx, c)
			return fn(ctx, c)
		})
		if err != nil || rep.Attempts != 3 {
			t.Fatalf("err %v, attempts %d", err, rep.Attempts)
		}
		if gap := rt.at[1].Sub(rt.at[0]); gap != 2*time.Second {
			t.Errorf("second request %v after the first, want 2s (retry-after: 2)", gap)
		}
		if gap := rt.at[2].Sub(rt.at[1]); gap != 300*time.Millisecond {
			t.Errorf("third request %v after the second, want 300ms (retry-after-ms: 300)", gap)
		}
		want := []si.Attempt{{Number: 1}, {Number: 2, LastStatus: 429, Waited: 2 * time.Second, WaitReason: "header retry-after"},
			{Number: 3, LastStatus: 503, Waited: 300 * time.Millisecond, WaitReason: "header retry-after-ms"}}
		for i, w := range want {
			g := a.got[i]
			if g.Number != w.Number || g.LastStatus != w.LastStatus || g.Waited != w.Waited || g.WaitReason != w.WaitReason {
				t.Errorf("attempt %d: got %+v, want %+v", i+1, g, w)
			}
		}
	})
}

func TestServerWaitPastDeadlineReturnsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := looptest.NewLoop(t, si.WithDefaultConfig(si.Config{MaxAttempts: 3}))
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		rt := &fakeRT{resps: []func() *http.Response{resp(429, "retry-after", "10")}}
		start := time.Now()
		rep, err := l.ExecuteWithImprovement(ctx, "a", get(&http.Client{Transport: si.Transport(rt)}))
		if err == nil || rep.Attempts != 1 || len(rt.at) != 1 || rep.Ignored {
			t.Errorf("err %v, attempts %d, requests %d, ignored %v: want one request, a failure", err, rep.Attempts, len(rt.at), rep.Ignored)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("returned after %v, want at once", d)
		}
		// The same from an error's RetryAfter method.
		rep, err = l.ExecuteWithImprovement(ctx, "b", func(context.Context, si.Config) error { return retryAfterErr{10 * time.Second} })
		if err == nil || rep.Attempts != 1 || time.Since(start) != 0 {
			t.Errorf("RetryAfter: err %v, attempts %d after %v", err, rep.Attempts, time.Since(start))
		}
		// A wait that fits is waited.
		rep, _ = l.ExecuteWithImprovement(ctx, "c", func(context.Context, si.Config) error { return retryAfterErr{200 * time.Millisecond} })
		if rep.Attempts != 3 || time.Since(start) != 400*time.Millisecond {
			t.Errorf("fitting wait: attempts %d after %v, want 3 after 400ms", rep.Attempts, time.Since(start))
		}
	})
}

func TestStrategyBackoffFollowsServerWait(t *testing.T) {
	fail := func(text string) si.Failure {
		return si.Failure{Err: text, Class: failure.ClassRateLimit, Cluster: "c"}
	}
	a := si.Analysis{
		Config:   si.Config{Backoff: time.Second, MaxAttempts: 2},
		Failures: []si.Failure{fail("429 rate limited (retry after 2s)"), fail("Rate limit reached. Please try again in 12.5s."), {Err: "try again in 1h", Class: failure.ClassOverloaded}},
		Clusters: []si.Cluster{{ID: "c", Class: failure.ClassRateLimit, Count: 3}},
	}
	tw, err := (&si.BuiltinStrategy{}).Analyze(context.Background(), a)
	if err != nil || tw == nil || tw.Review {
		t.Fatalf("tweak %+v, err %v", tw, err)
	}
	if tw.Config.Backoff != 12500*time.Millisecond || tw.Config.MaxAttempts != 3 {
		t.Errorf("backoff %v, attempts %d; want 12.5s (the longest wait asked), 3", tw.Config.Backoff, tw.Config.MaxAttempts)
	}
	a.Failures = a.Failures[:0]
	if tw, _ = (&si.BuiltinStrategy{}).Analyze(context.Background(), a); tw.Config.Backoff != 2*time.Second {
		t.Errorf("with no wait asked: backoff %v, want 2s", tw.Config.Backoff)
	}
}
