package selfimprove_test

import (
	"context"
	"errors"
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
