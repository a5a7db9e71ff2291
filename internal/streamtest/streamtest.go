// Package streamtest is the suite every SDK adapter's Stream helper
// passes (integrations/openai, integrations/anthropic): a local server
// that answers with the provider's exact server-sent events, and the
// cases a stream can end in, run under a Loop on a simulated clock. Time
// never passes by itself: the suite advances the clock once the server
// has answered what it must, and the first-token deadline fires then.
package streamtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Provider is one SDK's streams, for Run.
type Provider struct {
	// Start are the events before the first token (OpenAI's chunk with
	// the role, Anthropic's message_start and content_block_start).
	Start []string
	// Token is the event that carries text.
	Token func(text string) string
	// End are the events after the last token, the final event last
	// (OpenAI's chunk with the finish reason and "data: [DONE]";
	// Anthropic's content_block_stop, message_delta and message_stop).
	End []string
	// Error is an error event in a 200 stream, of class ErrorClass.
	Error      string
	ErrorClass failure.Class
	// Call makes one streaming request to the server at url through the
	// SDK's real client and the adapter's Stream, inside fn: it returns
	// the text of the answer and Stream's error. It calls onToken after
	// each event that carries text has been handed to Stream's callback.
	Call func(ctx context.Context, url string, onToken func()) (string, error)
}

// The loop's config in every case: the first-token deadline, well below
// the whole call's Timeout.
const (
	firstToken = 2 * time.Second
	timeout    = time.Minute
)

// Run runs the cases against p.
func Run(t *testing.T, p Provider) {
	t.Run("stall before the first token", func(t *testing.T) { stall(t, p) })
	t.Run("break mid-stream", func(t *testing.T) { retried(t, p, breaks, failure.ClassNetwork, wraps(stream.ErrInterrupted)) })
	t.Run("error event in a 200 stream", func(t *testing.T) { retried(t, p, errorEvent, p.ErrorClass, isAPIError) })
	t.Run("clean close without the final event", func(t *testing.T) { retried(t, p, truncated, failure.ClassNetwork, wraps(stream.ErrTruncated)) })
	t.Run("finish reason without the final event", func(t *testing.T) { finishedOnly(t, p) })
	t.Run("stall after the stream began", func(t *testing.T) { idles(t, p) })
	t.Run("long stream with a quick first token", func(t *testing.T) { long(t, p) })
	t.Run("stalls among long streams never raise Timeout", func(t *testing.T) { strategy(t, p) })
}

// env is one case's Loop, clock and server.
type env struct {
	t    *testing.T
	p    Provider
	clk  *fakeclock.Clock
	l    *si.Loop
	srv  *httptest.Server
	mu   sync.Mutex
	n    int
	errs []error // each attempt's error
	// arrived gets each request's number once its reply has sent what it
	// sends before it waits; tokens gets a value after each token the
	// client handled.
	arrived chan int
	tokens  chan struct{}
}

// reply answers the n-th request (from 1).
type reply func(e *env, w *writer, n int)

func newEnv(t *testing.T, p Provider, attempts int, r reply) *env {
	e := &env{t: t, p: p, clk: fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		arrived: make(chan int, 16), tokens: make(chan struct{}, 64)}
	// The transient floor is off: each case sets the attempts it counts.
	e.l = looptest.NewLoop(t, si.WithClock(e.clk), si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1}),
		si.WithDefaultConfig(si.Config{FirstTokenTimeout: firstToken, Timeout: timeout, MaxAttempts: attempts}))
	t.Cleanup(func() { e.l.Close() })
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.mu.Lock()
		e.n++
		n := e.n
		e.mu.Unlock()
		r(e, &writer{w: w, r: req}, n)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// call runs one call of agent "a" in the background; the result comes on
// the channel. The tokens of the calls before it, which have ended, are
// dropped first, so that the next value on e.tokens is this call's: a
// stale one let a case advance the clock past this call's first-token
// deadline before its token came (a flaky stall, 1 run in ~20).
func (e *env) call() <-chan result {
	for len(e.tokens) > 0 {
		<-e.tokens
	}
	out := make(chan result, 1)
	go func() {
		var text string
		rep, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
			var err error
			text, err = e.p.Call(ctx, e.srv.URL, func() { e.tokens <- struct{}{} })
			e.mu.Lock()
			e.errs = append(e.errs, err)
			e.mu.Unlock()
			return err
		})
		out <- result{rep, err, text}
	}()
	return out
}

type result struct {
	rep  si.Report
	err  error
	text string
}

// healthy answers with "Hello" in two tokens and the final event.
func healthy(e *env, w *writer) {
	w.send(e.p.Start...)
	w.send(e.p.Token("Hel"), e.p.Token("lo"))
	w.send(e.p.End...)
}

// stalls: the first request gets its opening events, then nothing; the
// second a healthy answer.
func stall(t *testing.T, p Provider) {
	e := newEnv(t, p, 2, func(e *env, w *writer, n int) {
		if n > 1 {
			healthy(e, w)
			return
		}
		w.send(p.Start...)
		e.arrived <- n
		w.hang()
	})
	res := e.call()
	<-e.arrived
	e.clk.Advance(firstToken - time.Millisecond)
	e.clk.Advance(time.Millisecond) // the deadline
	r := <-res
	if r.err != nil || r.rep.Attempts != 2 || r.text != "Hello" {
		t.Fatalf("err %v, attempts %d, text %q: want the retry's answer", r.err, r.rep.Attempts, r.text)
	}
	first := e.errs[0]
	if !errors.Is(first, failure.ErrFirstTokenTimeout) || failure.Classify(first) != failure.ClassFirstTokenTimeout {
		t.Errorf("the stalled attempt's error %v (class %q), want one that wraps ErrFirstTokenTimeout", first, failure.Classify(first))
	}
	if v, _ := e.l.View("a"); v.FirstToken.Count != 1 {
		t.Errorf("first tokens counted: %d, want the retry's", v.FirstToken.Count)
	}
}

// idles: the first request's stream sends 20 tokens, then stays open and
// silent; the stream idle limit (RetryPolicy.StreamIdle, 30 s by
// default) cuts it, and the retry answers. Before, nothing watched the
// gap between chunks: the attempt ran to its whole Timeout.
func idles(t *testing.T, p Provider) {
	const idle = 30 * time.Second
	e := newEnv(t, p, 2, func(e *env, w *writer, n int) {
		if n > 1 {
			healthy(e, w)
			return
		}
		w.send(p.Start...)
		for range 20 {
			w.send(p.Token("word "))
		}
		w.hang()
	})
	res := e.call()
	for range 20 {
		<-e.tokens // the client has handled each token
	}
	e.clk.Advance(idle - time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("the stream was cut before its idle limit: %+v", r)
	default:
	}
	e.clk.Advance(time.Millisecond) // the limit
	r := <-res
	if r.err != nil || r.rep.Attempts != 2 || r.text != "Hello" {
		t.Fatalf("err %v, attempts %d, text %q: want the retry's answer", r.err, r.rep.Attempts, r.text)
	}
	first := e.errs[0]
	if !errors.Is(first, failure.ErrStreamStalled) || failure.Classify(first) != failure.ClassStreamStalled {
		t.Errorf("the stalled attempt's error %v (class %q), want one that wraps ErrStreamStalled", first, failure.Classify(first))
	}
	if r.rep.Duration > idle+time.Second {
		t.Errorf("answered after %v, want the idle limit and the retry", r.rep.Duration)
	}
}

// retried runs a call whose first request ends as r says and whose
// second succeeds, and checks the first attempt's error: of class want,
// and as ok says.
func retried(t *testing.T, p Provider, r func(e *env, w *writer), want failure.Class, ok func(error) bool) {
	e := newEnv(t, p, 2, func(e *env, w *writer, n int) {
		if n > 1 {
			healthy(e, w)
			return
		}
		r(e, w)
	})
	res := <-e.call()
	if res.err != nil || res.rep.Attempts != 2 || res.text != "Hello" {
		t.Fatalf("err %v, attempts %d, text %q: want a retry that succeeds", res.err, res.rep.Attempts, res.text)
	}
	first := e.errs[0]
	if c := failure.Classify(first); c != want || !ok(first) {
		t.Errorf("first attempt: %v (class %q), want class %q", first, c, want)
	}
}

// wraps is a check that an error wraps target.
func wraps(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// isAPIError checks that err is the provider's error carried by a 200
// stream.
func isAPIError(err error) bool {
	var ae *failure.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusOK && ae.Type != ""
}

func breaks(e *env, w *writer) {
	w.send(e.p.Start...)
	w.send(e.p.Token("Hel"))
	w.cut()
}

func errorEvent(e *env, w *writer) {
	w.send(e.p.Start...)
	w.send(e.p.Token("Hel"), e.p.Error)
}

func truncated(e *env, w *writer) {
	w.send(e.p.Start...)
	w.send(e.p.Token("Hel"), e.p.Token("lo"))
}

// finishedOnly: a stream that said why it finished (OpenAI's
// finish_reason, Anthropic's message_delta with its stop_reason and
// usage) and was closed before its final event ("data: [DONE]",
// message_stop) is complete: one request, the whole answer. Some
// OpenAI-compatible servers never send the sentinel; before, each of
// their answers was thrown away and asked again, three times.
func finishedOnly(t *testing.T, p Provider) {
	e := newEnv(t, p, 3, func(e *env, w *writer, _ int) {
		w.send(e.p.Start...)
		w.send(e.p.Token("Hel"), e.p.Token("lo"))
		w.send(e.p.End[:len(e.p.End)-1]...)
	})
	res := <-e.call()
	if res.err != nil || res.rep.Attempts != 1 || res.text != "Hello" {
		t.Fatalf("err %v, attempts %d, text %q: want the answer at the first request", res.err, res.rep.Attempts, res.text)
	}
}

// longStream answers with a first token at once, then waits for the test
// to advance the clock well past the first-token deadline, then ends.
func longStream(e *env, w *writer, release <-chan struct{}) {
	w.send(e.p.Start...)
	w.send(e.p.Token("Hel"))
	w.wait(release)
	w.send(e.p.Token("lo"))
	w.send(e.p.End...)
}

// long: a stream longer than the first-token deadline with a quick first
// token succeeds, and its time to first token is counted.
func long(t *testing.T, p Provider) {
	release := make(chan struct{})
	e := newEnv(t, p, 1, func(e *env, w *writer, _ int) { longStream(e, w, release) })
	res := e.call()
	<-e.tokens
	e.clk.Advance(10 * firstToken)
	close(release)
	r := <-res
	if r.err != nil || r.text != "Hello" {
		t.Fatalf("err %v, text %q", r.err, r.text)
	}
	if v, _ := e.l.View("a"); v.FirstToken.Count != 1 || v.Failures != 0 {
		t.Errorf("first tokens %d, failures %d: want 1, 0", v.FirstToken.Count, v.Failures)
	}
}

// strategy: an agent whose long streams succeed and whose stalls cross
// the threshold gets a change that does not raise its Timeout.
func strategy(t *testing.T, p Provider) {
	var mu sync.Mutex
	stalled := map[int]bool{}
	releases := map[int]chan struct{}{}
	e := newEnv(t, p, 1, func(e *env, w *writer, n int) {
		mu.Lock()
		s, rel := stalled[n], releases[n]
		mu.Unlock()
		if s {
			w.send(p.Start...)
			e.arrived <- n
			w.hang()
			return
		}
		longStream(e, w, rel)
	})
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 9; n++ {
		mu.Lock()
		stalled[n] = n%3 == 0 // requests 3, 6, 9 stall
		releases[n] = make(chan struct{})
		mu.Unlock()
		res := e.call()
		if n%3 == 0 {
			<-e.arrived
			e.clk.Advance(firstToken)
		} else {
			<-e.tokens
			e.clk.Advance(10 * firstToken)
			close(releases[n])
		}
		r := <-res
		if (r.err != nil) != (n%3 == 0) {
			t.Fatalf("call %d: err %v", n, r.err)
		}
	}
	chs := e.l.Changes("a")
	if len(chs) != 1 {
		t.Fatalf("%d changes, want the strategy's one", len(chs))
	}
	if to := chs[0].To; to.Timeout != timeout || to.FirstTokenTimeout != firstToken || to.MaxAttempts != 2 ||
		!strings.Contains(chs[0].Reason, string(failure.ClassFirstTokenTimeout)) {
		t.Errorf("change to %+v (%s): want one more attempt, the same Timeout", to, chs[0].Reason)
	}
}
