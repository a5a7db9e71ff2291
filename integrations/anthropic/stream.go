package anthropic

import (
	"context"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Stream makes a streaming message (client.Messages.NewStreaming) inside
// the loop's fn, and returns the message it accumulated
// (ant.Message.Accumulate) with the error the loop should see. It calls
// onEvent, when not nil, with each event as it arrives, and reports the
// first token to the loop (stream.FirstToken) with the first
// content_block_delta, so that the config's FirstTokenTimeout bounds the
// wait for it. Its error is:
//
//   - nil for a stream that ended with message_stop, or whose
//     message_delta said why it stopped (stop_reason, with the usage): the
//     answer is complete even when the server closed before message_stop;
//   - stream.ErrTruncated (class network, retried) for one the server
//     closed without either: the answer may be cut short;
//   - an *Error (see Wrap) for an HTTP error, and for an error event
//     inside the 200 stream ("event: error", such as overloaded_error),
//     whose class comes from the provider's type like any API error's
//     (its Status is 200);
//   - for a stream cut by its context, the SDK's error with the
//     context's cause (failure.ErrFirstTokenTimeout for a stall before
//     the first token);
//   - otherwise, for a stream that broke mid-way, the read error wrapped
//     with stream.ErrInterrupted (class network, retried); a request that
//     got no event at all returns its error as Wrap does.
func Stream(ctx context.Context, client *ant.Client, params ant.MessageNewParams, onEvent func(ant.MessageStreamEventUnion), opts ...option.RequestOption) (ant.Message, error) {
	s := client.Messages.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var msg ant.Message
	first, final, began := false, false, false
	for s.Next() {
		ev := s.Current()
		began = true
		switch ev.Type {
		case "content_block_delta":
			if !first {
				first = true
				stream.FirstToken(ctx)
			}
		case "message_stop":
			final = true
		case "message_delta":
			final = final || ev.Delta.StopReason != "" // why it stopped, with the usage: complete
		}
		if ev.Type != "ping" {
			stream.Chunk(ctx) // the idle limit counts from here; a ping is no progress
		}
		if err := msg.Accumulate(ev); err != nil {
			return msg, stream.End(ctx, err, false)
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
	err := Wrap(s.Err())
	if !began && err != nil && ctx.Err() == nil {
		return msg, err // no stream began: the request's own failure
	}
	return msg, stream.End(ctx, err, final)
}
