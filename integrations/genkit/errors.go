package genkit

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
)

// Error is a provider's error as the loop understands it: a
// failure.APIError whose Provider is "genkit", read from openai-go's
// error (an HTTP error) or from the error event of a 200 stream (Status
// 200). It wraps Genkit's error.
type Error = failure.APIError

// ClientOptions returns the request options to give Genkit's
// OpenAI-compatible plugin (compat_oai.OpenAICompatible's Opts), before
// the caller's: openai-go's own retries off (the loop retries), its HTTP
// client's transport selfimprove.Transport over base (nil:
// http.DefaultTransport), and a watch on each stream for its final
// "data: [DONE]". With price.Transport(nil, prices) as base, each
// answer's token usage is booked, priced by prices, as the cost of the
// loop's call that made it: a completion's, and a stream's usage chunk,
// which the plugin does not ask for: give the request the config
// &openai.ChatCompletionNewParams{StreamOptions:
// openai.ChatCompletionStreamOptionsParam{IncludeUsage:
// openai.Bool(true)}} (ai.WithConfig), or the stream books no cost.
func ClientOptions(base http.RoundTripper) []option.RequestOption {
	return []option.RequestOption{
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: si.Transport(base)}),
		option.WithMiddleware(watchBody),
	}
}

// watchBody watches a 2xx response's body, for a streamed attempt
// (oaicompat.Capture.Watch), to note "data: [DONE]".
func watchBody(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if c := oaicompat.From(req.Context()); c != nil {
		c.Watch(res)
	}
	return res, err
}

// eventPrefix opens openai-go's error for an error event in a stream.
const eventPrefix = "received error while streaming: "

// Wrap returns err as an *Error when it holds openai-go's error (an HTTP
// error: the status, the provider's code and the wait its headers ask
// for) or an error event of a stream (Status 200), else unchanged. nil
// stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	var ae *openai.Error
	if errors.As(err, &ae) {
		e := &Error{Provider: "genkit", Err: err, Status: ae.StatusCode, Code: ae.Code, Type: ae.Type, Class: failure.Classify(err), Message: ae.Message}
		if ae.Response != nil {
			e.Wait, _ = failure.HeaderWait(ae.Response.Header, ae.StatusCode, time.Now())
		}
		if e.Wait == 0 {
			e.Wait, _ = failure.ErrorWait(err)
		}
		return e
	}
	msg := err.Error()
	i := strings.Index(msg, eventPrefix)
	if i < 0 {
		return err
	}
	ev := &eventError{err: err, body: `{"error":` + msg[i+len(eventPrefix):] + `}`}
	p, ok := failure.ProviderErrorOf(ev)
	if !ok {
		return err
	}
	return &Error{Provider: "genkit", Err: ev, Status: http.StatusOK, Code: p.Code, Type: p.Type, Class: failure.Classify(ev), Message: p.Message}
}

// eventError is an error event of a stream, with its data as the
// provider's error body (RawJSON), which package failure reads.
type eventError struct {
	err  error
	body string
}

func (e *eventError) Error() string   { return e.err.Error() }
func (e *eventError) Unwrap() error   { return e.err }
func (e *eventError) RawJSON() string { return e.body }
