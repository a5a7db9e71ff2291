// Package stream is for functions that the selfimprove loop runs and that
// stream their answer: FirstToken tells the loop when the first token
// came (the loop enforces the config's FirstTokenTimeout and measures
// the time to first token), and End says how a stream ended, as the
// loop's classes see it. The SDK adapters' Stream helpers
// (integrations/openai, integrations/anthropic) use both; a function
// that reads another SDK's stream may too.
//
// The package imports nothing of the loop: only the standard library,
// package failure and the context key the loop sets (internal/firsttoken).
package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/firsttoken"
)

// FirstToken tells the loop that the attempt whose context is ctx (or a
// context derived from it) received its first token: the first-token
// deadline (Config.FirstTokenTimeout) no longer applies to it, and the
// time since the attempt began is its time to first token (counted in
// AgentView.FirstToken). Call it once the first
// piece of the answer arrives, not when the response headers do. Calls
// after the first, and calls outside an attempt with a first-token
// deadline, do nothing. It allocates nothing and is safe for concurrent
// use.
func FirstToken(ctx context.Context) {
	if w, ok := ctx.Value(firsttoken.Key{}).(firsttoken.Watch); ok {
		w.FirstToken()
	}
}

// Chunk tells the loop that the attempt whose context is ctx received a
// piece of its stream: the stream idle limit (selfimprove's
// RetryPolicy.StreamIdle, 30 s by default) counts the silence from the
// last one, once the first token came. Call it with every chunk;
// FirstToken counts as one. Outside an attempt with a first-token
// deadline it does nothing. It allocates nothing and is safe for
// concurrent use.
func Chunk(ctx context.Context) {
	if w, ok := ctx.Value(firsttoken.Key{}).(firsttoken.Watch); ok {
		w.Chunk()
	}
}

// ErrTruncated is the error of a stream that the server closed cleanly
// without its final event (OpenAI's "data: [DONE]", Anthropic's
// message_stop): the answer may be cut short, so the call fails. Its
// class is failure.ClassNetwork: it is retried.
var ErrTruncated error = &streamError{"stream: ended without its final event"}

// ErrInterrupted is wrapped, with the read error, by End's error for a
// stream that broke while it was read (a reset connection, a body cut
// short). Its class is failure.ClassNetwork: it is retried.
var ErrInterrupted error = &streamError{"stream: interrupted"}

// streamError is a stream's own failure: of the network class.
type streamError struct{ text string }

func (e *streamError) Error() string { return e.text }

// FailureClass returns failure.ClassNetwork.
func (e *streamError) FailureClass() failure.Class { return failure.ClassNetwork }

// End returns the error a function should return for a stream that ended
// with err, its SDK's error (nil when the stream simply stopped), having
// received its final event or not:
//
//   - nil, when err is nil and final is set;
//   - nil, when final is set and err is a network error (a reset, an
//     unexpected EOF; not one that names its class) while ctx lives: the
//     provider said the answer was complete, and the connection was cut
//     after that, before the transport's own end; asking again would only
//     pay for it twice. Any other error (the caller's streaming
//     function's, the client's verdict on the answer) unchanged;
//   - ErrTruncated, when err is nil and final is not;
//   - err unchanged, when an error in its chain names its class (as the
//     adapters' Wrap errors do: a provider's error event in the stream
//     is the provider's error) or wraps ctx's cause;
//   - when ctx has ended: err joined with context.Cause(ctx), so that the
//     loop sees why (failure.ErrFirstTokenTimeout, the attempt's
//     deadline, the caller's cancel);
//   - a read that timed out while ctx lived (the client's own deadline,
//     such as http.Client.Timeout, cut a stream gone silent): err wrapped
//     with failure.ErrStreamStalled, a stall like the idle limit's, which
//     the loop takes to the next route;
//   - otherwise: err wrapped with ErrInterrupted, of the network class.
func End(ctx context.Context, err error, final bool) error {
	switch {
	case err == nil && final:
		return nil
	case err == nil:
		return ErrTruncated
	case named(err):
		return err
	case final && ctx.Err() == nil:
		if failure.Classify(err) == failure.ClassNetwork {
			return nil // complete, then the connection cut
		}
		return err // not the stream's: the client's own verdict, the caller's callback
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); !failure.Is(err, cause) {
			return errors.Join(err, cause)
		}
		return err
	case failure.Classify(err) == failure.ClassTimeout: // a deadline passed, a net.Error's Timeout
		return fmt.Errorf("%w: %w", failure.ErrStreamStalled, err)
	}
	return fmt.Errorf("%w: %w", ErrInterrupted, err)
}

// named reports whether an error in err's chain names its class.
func named(err error) (ok bool) {
	failure.Walk(err, func(e error) bool {
		_, ok = e.(interface{ FailureClass() failure.Class })
		return !ok
	})
	return ok
}
