package selfimprove_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 27: a bad answer is not a bad request. The caller's validator
// says the model's JSON lacks a field; the second sample passes. Before,
// the text was classed bad_request, which is permanent: 0 of 40 calls
// succeeded.
func TestBadOutputIsRetried(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithClock(clk), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bad := []error{
		errors.New(`output does not match schema: missing required property "answer"`),
		errors.New("the model refused to answer in JSON"),
		failure.BadOutput(errors.New("the summary names no source")),
	}
	ok, sent := 0, 0
	for i := range 40 {
		start := clk.Now()
		n := 0
		rep, _ := l.ExecuteWithImprovement(context.Background(), "writer", func(context.Context, si.Config) error {
			sent++
			if n++; n == 1 {
				return bad[i%len(bad)]
			}
			return nil
		})
		if rep.Success {
			ok++
		}
		if w := clk.Now().Sub(start); w != 0 {
			t.Fatalf("call %d waited %v before resampling, want no wait", i, w)
		}
	}
	if ok != 40 || sent != 80 {
		t.Fatalf("%d of 40 calls succeeded with %d requests, want 40 with 80", ok, sent)
	}
	// A provider's 400 stays bad_request: not retried.
	sent = 0
	rep, _ := l.ExecuteWithImprovement(context.Background(), "writer", func(context.Context, si.Config) error {
		sent++
		return errors.New("400 Bad Request: response_format does not match schema")
	})
	if rep.Success || sent != 1 {
		t.Fatalf("a provider's 400: %d requests", sent)
	}
}

// Issue 27 item 1: the built-in strategy answers bad outputs with one
// more attempt (another sample), and once attempts are at their cap with
// a proposal that names another model, the temperature or the output
// format: never bad_request's "fix the request the agent builds".
func TestBuiltinStrategyAnswersBadOutputs(t *testing.T) {
	s := &si.BuiltinStrategy{}
	bad := clusters(failure.ClassBadOutput, 3)
	tw, err := s.Analyze(context.Background(), si.Analysis{Config: si.Config{MaxAttempts: 2}, Clusters: bad})
	if err != nil || tw == nil || tw.Review || tw.Config.MaxAttempts != 3 {
		t.Fatalf("bad outputs under 2 attempts: %+v, %v; want a safe tweak to 3 attempts", tw, err)
	}
	tw, err = s.Analyze(context.Background(), si.Analysis{Config: si.Config{MaxAttempts: 5}, Clusters: bad})
	if err != nil || tw == nil || !tw.Review {
		t.Fatalf("bad outputs at the attempts' cap: %+v, %v; want a proposal", tw, err)
	}
	for _, want := range []string{"another model", "temperature", "output format"} {
		if !strings.Contains(tw.Rule, want) {
			t.Errorf("the proposal's rule %q does not name %q", tw.Rule, want)
		}
	}
	if strings.Contains(tw.Rule, "Fix the request") {
		t.Errorf("the proposal's rule %q blames the request", tw.Rule)
	}
}
