package failure

import "context"

// ClassFirstTokenTimeout is a streamed call that sent no first token
// before its first-token deadline (selfimprove's
// Config.FirstTokenTimeout): the upstream stalled before it began to
// answer. It is a timeout apart from ClassTimeout, a whole call that
// outlasted its deadline, because the fixes differ: a stall calls for a
// new request or another route, not for a longer deadline. It is retried.
const ClassFirstTokenTimeout Class = "first_token_timeout"

// ErrFirstTokenTimeout is the cause (context.Cause) of an attempt that
// the selfimprove loop cancelled because no first token came within the
// config's FirstTokenTimeout. Its class is ClassFirstTokenTimeout, its
// Timeout method reports true, and errors.Is(ErrFirstTokenTimeout,
// context.DeadlineExceeded) is true: it is a deadline. An error that
// wraps it (as net/http's errors wrap their context's cause) has its
// class.
var ErrFirstTokenTimeout error = firstTokenTimeout{}

type firstTokenTimeout struct{}

func (firstTokenTimeout) Error() string {
	return "first token timeout: no first token before the first-token deadline"
}

// FailureClass returns ClassFirstTokenTimeout.
func (firstTokenTimeout) FailureClass() Class { return ClassFirstTokenTimeout }

// Timeout reports true, as a net.Error's does for a deadline.
func (firstTokenTimeout) Timeout() bool { return true }

// Is reports whether target is context.DeadlineExceeded.
func (firstTokenTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// ClassStreamStalled is a streamed call whose stream went silent after
// it began: no chunk for longer than the stream idle limit (selfimprove's
// RetryPolicy.StreamIdle). Like a stall before the first token, it calls
// for a new request or another route, not for a longer deadline. It is
// retried.
const ClassStreamStalled Class = "stream_stalled"

// ErrStreamStalled is the cause (context.Cause) of an attempt that the
// selfimprove loop cancelled because its stream, begun, sent no chunk
// within the stream idle limit. Its class is ClassStreamStalled, its
// Timeout method reports true, and errors.Is(ErrStreamStalled,
// context.DeadlineExceeded) is true.
var ErrStreamStalled error = streamStalled{}

type streamStalled struct{}

func (streamStalled) Error() string {
	return "stream stalled: no chunk within the stream idle limit"
}

// FailureClass returns ClassStreamStalled.
func (streamStalled) FailureClass() Class { return ClassStreamStalled }

// Timeout reports true, as a net.Error's does for a deadline.
func (streamStalled) Timeout() bool { return true }

// Is reports whether target is context.DeadlineExceeded.
func (streamStalled) Is(target error) bool { return target == context.DeadlineExceeded }
