package langchaingo

import (
	"errors"
	"net/http"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
)

// Error is a provider's error as the loop understands it: a
// failure.APIError whose Provider is "langchaingo", read from the
// response the transport of HTTPClient saw (an HTTP error), or from the
// error event of a 200 stream (Status 200). It wraps langchaingo's error.
type Error = failure.APIError

// HTTPClient returns the HTTP client to give langchaingo's provider
// client (openai.WithHTTPClient): its transport is selfimprove.Transport
// over base (nil: http.DefaultTransport); it keeps the status, headers
// and error body (its first 64 KiB) of a failed response for the error
// Generate returns, and watches a streamed answer for its final event
// ("data: [DONE]") and for an error event. With price.Transport(nil,
// prices) as base, each answer's token usage (a completion's, a
// stream's usage chunk, which langchaingo's OpenAI client asks for) is
// booked, priced by prices, as the cost of the loop's call that made it.
func HTTPClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: oaicompat.Transport(si.Transport(base))}
}

// errEvent is the error an *Error of an error event wraps: langchaingo's
// OpenAI client skips the event and returns none.
var errEvent = errors.New("langchaingo adapter: error event in the stream")

// eventError returns the *Error (Status 200) of the error event data, a
// stream's `{"error": {...}}`.
func eventError(data []byte) error { return oaicompat.Event("langchaingo", errEvent, data) }
