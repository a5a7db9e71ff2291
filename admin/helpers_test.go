package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var errBoom = errors.New("upstream 503: service unavailable")

const token = "s3cret-token-value"

// fixture is a Loop with two agents that have history, and the handler
// served by an httptest.Server.
type fixture struct {
	l   *si.Loop
	clk *fakeclock.Clock
	srv *httptest.Server
}

// strategy tweaks "alpha" at once and files a proposal for the others.
func strategy(_ context.Context, a si.Analysis) (*si.Tweak, error) {
	c := a.Config
	c.Timeout += 2 * time.Second
	c.MaxAttempts = 2
	return &si.Tweak{Config: c, Reason: "raise the timeout", Review: a.AgentID != "alpha", Rule: "raise the quota", Confidence: 0.8}, nil
}

func newLoop(t testing.TB, opts ...si.Option) (*si.Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(t0)
	opts = append([]si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil),
		si.WithStrategy(si.StrategyFunc(strategy)), si.WithFlushInterval(0),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}), // the latencies the tests set, one attempt each
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	l, err := si.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clk
}

// traffic makes calls of agent: ok successes, then bad failures, the
// clock moving a second each.
func traffic(t testing.TB, l *si.Loop, clk *fakeclock.Clock, agent string, ok, bad int) {
	t.Helper()
	for i := range ok + bad {
		fail := i >= ok
		l.ExecuteWithImprovement(context.Background(), agent, func(context.Context, si.Config) error {
			if clk != nil {
				clk.Advance(20 * time.Millisecond)
			}
			if fail {
				return errBoom
			}
			return nil
		})
		if clk != nil {
			clk.Advance(time.Second)
		}
	}
}

// newFixture makes a loop where "alpha" had a change applied, "beta" has
// a pending proposal, and serves it with opts.
func newFixture(t *testing.T, opts admin.Options) *fixture {
	t.Helper()
	l, clk := newLoop(t)
	th := si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}
	for _, id := range []string{"alpha", "beta"} {
		if err := l.SetThreshold(id, th); err != nil {
			t.Fatal(err)
		}
		traffic(t, l, clk, id, 20, 4)
	}
	if len(l.Changes("alpha")) == 0 {
		t.Fatal("alpha has no change")
	}
	if len(l.Proposals(nil)) == 0 {
		t.Fatal("beta has no proposal")
	}
	f := &fixture{l: l, clk: clk}
	f.srv = httptest.NewServer(http.StripPrefix("/si", admin.Handler(l, opts)))
	t.Cleanup(f.srv.Close)
	return f
}

// do sends a request to the handler (path under its prefix) and returns
// the status and the body.
func (f *fixture) do(t testing.TB, method, path, tok, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+"/si"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// get does a GET with the token and decodes a 200 answer into v.
func (f *fixture) get(t testing.TB, path string, v any) {
	t.Helper()
	code, b := f.do(t, "GET", path, token, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	reflect.ValueOf(v).Elem().SetZero()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// post does a JSON POST with the token and returns the status and body.
func (f *fixture) post(t testing.TB, path, body string) (int, []byte) {
	t.Helper()
	return f.do(t, "POST", path, token, "application/json", body)
}

// errorOf decodes an ErrorBody and checks its status and field.
func errorOf(t testing.TB, what string, code int, b []byte, wantCode int, wantField string) {
	t.Helper()
	var e admin.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %d, body not an ErrorBody: %v: %q", what, code, err, b)
	}
	if code != wantCode || e.Status != wantCode || e.Field != wantField || e.Error == "" {
		t.Errorf("%s: %d %+v, want %d field %q", what, code, e, wantCode, wantField)
	}
	if strings.Contains(string(b), token) || strings.Contains(string(b), "goroutine") {
		t.Errorf("%s: the answer leaks: %s", what, b)
	}
}

// httptestGet serves GET path with h and returns the body.
func httptestGet(h http.Handler, path string) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost"+path, nil))
	return rec.Body.String()
}
