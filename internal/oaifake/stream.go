package oaifake

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/routesim"
	"github.com/self-improving-loop/selfimprove/internal/streamtest"
)

// OpenAI's chat completion stream, as the API sends it: "data: {chunk}"
// events, then "data: [DONE]".
const chunkHead = `{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_1","choices":[`

var (
	// StartEvent opens a stream: the assistant's role.
	StartEvent = `data: ` + chunkHead + `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`
	// EndEvents close a stream: the finish reason, then "data: [DONE]".
	EndEvents = []string{`data: ` + chunkHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`, `data: [DONE]`}
)

// ErrorEvent is a server error inside a 200 stream, of class
// failure.ClassOverloaded.
const ErrorEvent = `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`

// TokenEvent is the event that carries text.
func TokenEvent(text string) string {
	return fmt.Sprintf(`data: %s{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`, chunkHead, text)
}

// ModelNotFoundEvent is the error event of a stream for a model that
// does not exist.
func ModelNotFoundEvent(model string) string {
	return `data: {"error":{"message":"The model ` + "`" + model + "`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
}

// SSE is a whole stream whose tokens are texts.
func SSE(texts ...string) []string {
	return append(partial(texts), EndEvents...)
}

// partial is a stream whose tokens are texts, closed before its end.
func partial(texts []string) []string {
	ev := []string{StartEvent}
	for _, t := range texts {
		ev = append(ev, TokenEvent(t))
	}
	return ev
}

// SSEReply is a whole streamed answer whose tokens are texts, or, with
// final false, one the server closes before "data: [DONE]", for
// NewServer (whose Content-Type, application/json, replaces the
// reply's).
func SSEReply(final bool, texts ...string) Reply {
	ev := partial(texts)
	if final {
		ev = SSE(texts...)
	}
	return Reply{Status: http.StatusOK, Headers: map[string]string{"Content-Type": "text/event-stream"}, Body: join(ev)}
}

// Stream is the streamtest suite's provider with OpenAI's events, whose
// calls are made by call.
func Stream(call func(ctx context.Context, url string, onToken func()) (string, error)) streamtest.Provider {
	return streamtest.Provider{
		Start:      []string{StartEvent},
		Token:      TokenEvent,
		End:        EndEvents,
		Error:      ErrorEvent,
		ErrorClass: failure.ClassOverloaded,
		Call:       call,
	}
}

// SimReply is OpenAI's answer of kind k, as the API sends it, for
// routesim.SDK's Reply.
func SimReply(k routesim.Kind, model string, _ time.Time) routesim.Reply {
	var r Reply
	switch k {
	case routesim.OK:
		r = OK("hi")
	case routesim.Overloaded, routesim.ServerError:
		r = APIError(503, "server_error", "", "The server is overloaded or not ready yet.", nil)
	case routesim.Withdrawn:
		r = APIError(404, "invalid_request_error", "model_not_found", "The model `"+model+"` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations", nil)
	case routesim.NoQuota:
		r = APIError(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", nil)
	case routesim.RateLimited:
		r = APIError(429, "requests", "rate_limit_exceeded", "Rate limit reached for "+model+" in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 2s.",
			map[string]string{"retry-after": "2", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"})
	}
	return routesim.Reply{Status: r.Status, Header: r.Headers, Body: r.Body}
}
