package stream_test

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/stream"
)

// End's error for each way a stream ends, by the class the loop sees. A
// read timeout while the call lives (the client's own deadline cut a
// silent stream) is a stall, which the loop takes to the next route;
// before, it was "interrupted", of the network class, and retried on the
// same route.
func TestEnd(t *testing.T) {
	live := context.Background()
	cut, cancel := context.WithCancelCause(context.Background())
	cancel(failure.ErrFirstTokenTimeout)
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		err   error
		final bool
		want  failure.Class // "": nil
	}{
		{"complete", live, nil, true, ""},
		{"closed without its final event", live, nil, false, failure.ClassNetwork},
		{"reset mid-stream", live, &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}, false, failure.ClassNetwork},
		{"read deadline mid-stream", live, os.ErrDeadlineExceeded, false, failure.ClassStreamStalled},
		{"client timeout mid-stream", live, context.DeadlineExceeded, false, failure.ClassStreamStalled},
		{"cut by the loop's first-token deadline", cut, context.Canceled, false, failure.ClassFirstTokenTimeout},
		// Complete (message_stop, or a finish_reason), then the connection
		// cut before the chunked body's end: before, interrupted, and the
		// answer asked for again (a user-level review's finding).
		{"complete, then reset", live, io.ErrUnexpectedEOF, true, ""},
		{"complete, then reset after the caller gave up", cut, io.ErrUnexpectedEOF, true, failure.ClassFirstTokenTimeout},
		{"complete, then the caller's callback failed", live, errors.New("callback error: client went away"), true, failure.ClassOther},
		{"complete, then the client found no choice", live, errors.New("no choices in completion"), true, failure.ClassEmptyResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stream.End(tc.ctx, tc.err, tc.final)
			if got := failure.Classify(err); (err == nil) != (tc.want == "") || err != nil && got != tc.want {
				t.Errorf("End = %v (class %q); want class %q", err, got, tc.want)
			}
			if tc.name == "closed without its final event" && !errors.Is(err, stream.ErrTruncated) {
				t.Errorf("End = %v; want ErrTruncated", err)
			}
		})
	}
}
