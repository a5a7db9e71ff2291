package eino

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	goopenai "github.com/meguminnnnnnnnn/go-openai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
)

// Error is a provider's error as the loop understands it: a
// failure.APIError whose Provider is "eino", read from the response the
// transport of HTTPClient saw (an HTTP error), or from the error event
// of a 200 stream (Status 200). It wraps Eino's error.
type Error = failure.APIError

// HTTPClient returns the HTTP client to give Eino's OpenAI model
// (openai.ChatModelConfig's HTTPClient): its transport is
// selfimprove.Transport over base (nil: http.DefaultTransport); it keeps
// the status, headers and error body (its first 64 KiB) of a failed
// response for the error the wrapper returns, and notes whether a
// stream carried its final event ("data: [DONE]"). With
// price.Transport(nil, prices) as base, each answer's token usage (a
// completion's, a stream's usage chunk, which Eino's OpenAI model asks
// for) is booked, priced by prices, as the cost of the loop's call that
// made it.
func HTTPClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: oaicompat.Transport(si.Transport(base))}
}

// wrap returns err as an *Error when the transport saw an HTTP error or
// err holds a provider's error event, else unchanged.
func wrap(c *oaicompat.Capture, err error) error {
	if c.Failed() {
		return c.Wrap("eino", err)
	}
	return eventError(err)
}

// eventError returns err as an *Error of Status 200 when it holds the
// error event of a 200 stream (go-openai's *APIError without an HTTP
// status), else unchanged.
func eventError(err error) error {
	var ae *goopenai.APIError
	if !errors.As(err, &ae) || ae.HTTPStatusCode != 0 {
		return err
	}
	code := ""
	if ae.Code != nil {
		code = fmt.Sprint(ae.Code)
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": ae.Message, "type": ae.Type, "code": ae.Code}})
	h := &oaicompat.Failure{Err: err, Status: http.StatusOK, Body: string(b)}
	return &Error{Provider: "eino", Err: err, Status: http.StatusOK, Code: code, Type: ae.Type, Class: failure.Classify(h), Message: ae.Message}
}
