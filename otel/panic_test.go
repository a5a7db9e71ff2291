package otel_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	siotel "github.com/self-improving-loop/selfimprove/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestPanickingCallSpanFailedAndScrubbed: a call whose function panics
// still ends its span, marked as a failure of its agent (status Error,
// the selfimprove.* attributes), and the panic's text reaches the span
// scrubbed of secrets, as a failed call's error does; the panic goes on
// to the caller unchanged.
func TestPanickingCallSpanFailedAndScrubbed(t *testing.T) {
	l, _ := newLoop(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	w, err := siotel.Wrap(l, tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-abcdefghijklmnopqrstuvwxyz123456"
	pv := errors.New("client crashed, api_key=" + secret)
	got := func() (r any) {
		defer func() { r = recover() }()
		w.Execute(context.Background(), "a", func(context.Context, si.Config) error { panic(pv) })
		return nil
	}()
	if got != pv {
		t.Fatalf("recovered %v, want the panic value", got)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	s := spans[0]
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		attrs[a.Key] = a.Value
	}
	if attrs["selfimprove.agent"].AsString() != "a" || attrs["selfimprove.outcome"].AsString() != "failure" {
		t.Errorf("span attributes %v, want agent a, outcome failure", attrs)
	}
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "panic") {
		t.Errorf("span status %+v, want Error naming the panic", s.Status())
	}
	for _, e := range s.Events() {
		for _, a := range e.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("event %s: %s=%q holds the secret", e.Name, a.Key, a.Value.String())
			}
		}
	}
	if strings.Contains(s.Status().Description, secret) {
		t.Errorf("status %q holds the secret", s.Status().Description)
	}
}

// TestGoexitCallSpanFailed: a call whose function ends its goroutine
// (runtime.Goexit, t.FailNow in a test) ends its span as a failure of its
// agent, as the loop counts it.
func TestGoexitCallSpanFailed(t *testing.T) {
	l, _ := newLoop(t)
	rec := tracetest.NewSpanRecorder()
	w, err := siotel.Wrap(l, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Execute(context.Background(), "a", func(context.Context, si.Config) error { runtime.Goexit(); return nil })
	}()
	<-done
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range spans[0].Attributes() {
		attrs[a.Key] = a.Value
	}
	if attrs["selfimprove.outcome"].AsString() != "failure" || spans[0].Status().Code != codes.Error {
		t.Errorf("span attributes %v, status %+v; want a failure", attrs, spans[0].Status())
	}
}
