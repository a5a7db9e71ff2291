package openai

import (
	"context"
	"errors"
	"net/http"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Stream makes a streaming chat completion (client.Chat.Completions.
// NewStreaming) inside the loop's fn, and returns the answer it
// accumulated (oai.ChatCompletionAccumulator) with the error the loop
// should see. It calls onChunk, when not nil, with each chunk as it
// arrives, and reports the first token to the loop (stream.FirstToken)
// with the first chunk that carries content, audio, a refusal, a tool
// call or a (legacy) function call, so that the config's
// FirstTokenTimeout bounds the wait for it. Its error is:
//
//   - nil for a stream that ended with "data: [DONE]", or that said why
//     every choice it carried finished (each one's finish_reason: the
//     choices of a request with n above 1 stream side by side) and,
//     when the request asked for the usage
//     (stream_options.include_usage), sent it: the answer is complete
//     even when the server closed before "data: [DONE]";
//   - stream.ErrTruncated (class network, retried) for one the server
//     closed without either, a choice still unfinished: the answer may be
//     cut short;
//   - an *Error (see Wrap) for an HTTP error, and for an error event
//     inside the 200 stream ("data: {"error": {…}}"), whose class comes
//     from the provider's code and type like any API error's (its Status
//     is 200);
//   - for a stream cut by its context, the SDK's error with the
//     context's cause (failure.ErrFirstTokenTimeout for a stall before
//     the first token);
//   - otherwise, for a stream that broke mid-way, the read error wrapped
//     with stream.ErrInterrupted (class network, retried); a request that
//     got no stream at all returns its error as Wrap does.
//
// opts are added to the request's; Stream adds one that watches the
// body for "data: [DONE]".
func Stream(ctx context.Context, client *oai.Client, params oai.ChatCompletionNewParams, onChunk func(oai.ChatCompletionChunk), opts ...option.RequestOption) (oai.ChatCompletion, error) {
	done := new(doneWatch)
	s := client.Chat.Completions.NewStreaming(ctx, params, append(opts, option.WithMiddleware(done.middleware))...)
	defer s.Close()
	var acc oai.ChatCompletionAccumulator
	var choices oaicompat.Choices
	first, usage := false, !params.StreamOptions.IncludeUsage.Value
	for s.Next() {
		chunk := s.Current()
		if !first && hasToken(&chunk) {
			first = true
			stream.FirstToken(ctx)
		}
		stream.Chunk(ctx) // the idle limit counts from here
		noteChoices(&choices, &chunk)
		usage = usage || chunk.Usage.TotalTokens > 0
		acc.AddChunk(chunk)
		if onChunk != nil {
			onChunk(chunk)
		}
	}
	err := streamErr(s.Err())
	if done.body == nil && err != nil && ctx.Err() == nil {
		return acc.ChatCompletion, err // no stream began: the request's own failure
	}
	return acc.ChatCompletion, stream.End(ctx, err, done.seen() || choices.Finished() && usage)
}

// noteChoices notes in cs the choices c carries, and which of them say
// why they finished.
func noteChoices(cs *oaicompat.Choices, c *oai.ChatCompletionChunk) {
	for i := range c.Choices {
		cs.Note(c.Choices[i].Index, c.Choices[i].FinishReason != "")
	}
}

// hasToken reports whether c carries a piece of the answer: content,
// audio, a refusal, a tool call or a legacy function call (the
// functions parameter's answer).
func hasToken(c *oai.ChatCompletionChunk) bool {
	for i := range c.Choices {
		d := &c.Choices[i].Delta
		//lint:ignore SA1019 a request may still ask for function_call: its answer is a token
		fc := &d.FunctionCall
		if d.Content != "" || d.Refusal != "" || len(d.ToolCalls) > 0 ||
			fc.Name != "" || fc.Arguments != "" || d.Audio.Data != "" || d.Audio.Transcript != "" {
			return true
		}
	}
	return false
}

// streamErr maps the stream's error: an error event to an *Error, the
// rest as Wrap does.
func streamErr(err error) error {
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		return Wrap(err)
	}
	ev := &eventError{se}
	p, _ := failure.ProviderErrorOf(ev)
	return &Error{Provider: "openai", Err: ev, Status: http.StatusOK, Code: p.Code, Type: p.Type, Class: failure.Classify(ev), Message: p.Message}
}

// eventError is an error event of the stream, with its data as the
// provider's error body (RawJSON), which package failure reads.
type eventError struct{ *ssestream.StreamError }

// RawJSON returns the event's data: {"error": {…}}.
func (e *eventError) RawJSON() string { return string(e.Event.Data) }

// Unwrap returns the SDK's error.
func (e *eventError) Unwrap() error { return e.StreamError }

// doneWatch notes whether a response body carried "data: [DONE]".
type doneWatch struct{ body *oaicompat.Body }

// middleware wraps the response's body to watch it.
func (w *doneWatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if res != nil && res.Body != nil && res.StatusCode < 300 {
		w.body = &oaicompat.Body{ReadCloser: res.Body}
		res.Body = w.body
	}
	return res, err
}

// seen reports whether the body carried "data: [DONE]".
func (w *doneWatch) seen() bool { return w.body != nil && w.body.Done() }
