package failure

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"syscall"
)

// Class is the kind of a failure, as Classify finds it. It is a string so
// that an error can name a class of its own (see Classify).
type Class string

// The classes Classify knows.
const (
	ClassRateLimit        Class = "rate_limit"        // 429, quota, throttling
	ClassTimeout          Class = "timeout"           // deadline exceeded, timed out, 408
	ClassOverloaded       Class = "overloaded"        // 5xx, overloaded, unavailable
	ClassNetwork          Class = "network"           // refused, reset, DNS, EOF
	ClassAuth             Class = "auth"              // 401, 403, invalid key
	ClassBadRequest       Class = "bad_request"       // 400, 422, schema, validation
	ClassNotFound         Class = "not_found"         // 404, no such thing
	ClassModelUnavailable Class = "model_unavailable" // model not found, deprecated, withdrawn
	ClassContextLength    Class = "context_length"    // too many tokens, context window exceeded
	ClassEmptyResponse    Class = "empty_response"    // nothing came back
	ClassContentFilter    Class = "content_filter"    // refusal, safety, moderation
	ClassBadOutput        Class = "bad_output"        // the answer failed the caller's validation or parsing, or was refused (see BadOutput)
	ClassToolError        Class = "tool_error"        // a tool or function call failed
	ClassPanic            Class = "panic"             // the wrapped function panicked
	ClassCanceled         Class = "canceled"          // context canceled
	ClassOther            Class = "other"             // none of the above
)

// RootCause is a failure's root cause: what part of the agent's work went
// wrong.
type RootCause string

// The root causes. Classify's classes map onto the first five (see
// Class.RootCause); RootCauseOverconfidence (an answer given with
// unwarranted certainty) needs a judge of the output, so no built-in class
// maps to it.
const (
	RootCauseToolFailure          RootCause = "tool_failure"          // an API, tool or network the agent uses failed
	RootCauseContextLoss          RootCause = "context_loss"          // the agent lost or overflowed its context
	RootCauseKnowledgeGap         RootCause = "knowledge_gap"         // the agent asked for what does not exist
	RootCauseInstructionAmbiguity RootCause = "instruction_ambiguity" // the agent's request or prompt was not acceptable
	RootCauseReasoningError       RootCause = "reasoning_error"       // the agent's own logic failed
	RootCauseOverconfidence       RootCause = "overconfidence"        // an answer given with unwarranted certainty
)

// RootCause maps c onto REFLEX's taxonomy: failures of an API, a tool or
// the network are tool_failure; context_length is context_loss; not_found
// is knowledge_gap; bad_request and content_filter are
// instruction_ambiguity; empty_response, panic, other and any class
// Classify does not know are reasoning_error.
func (c Class) RootCause() RootCause {
	switch c {
	case ClassRateLimit, ClassTimeout, ClassOverloaded, ClassNetwork, ClassAuth,
		ClassModelUnavailable, ClassToolError, ClassCanceled, ClassQuota, ClassFirstTokenTimeout, ClassStreamStalled:
		return RootCauseToolFailure
	case ClassContextLength:
		return RootCauseContextLoss
	case ClassNotFound:
		return RootCauseKnowledgeGap
	case ClassBadRequest, ClassContentFilter:
		return RootCauseInstructionAmbiguity
	}
	// bad_output is reasoning_error: the model's answer was wrong.
	return RootCauseReasoningError
}

// Classify returns the class of err (ClassOther for nil or an error it
// cannot place). It looks at Go's own signals first, through the chain of
// wrapped errors (Unwrap, errors.Join; at most 64 errors, 32 deep, an
// error met again, as in a cycle, not read again):
//
//  1. an error with a method FailureClass() Class names its own class;
//  2. context.Canceled is canceled; context.DeadlineExceeded,
//     os.ErrDeadlineExceeded, a net.Error whose Timeout() is true and
//     ETIMEDOUT are timeout;
//  3. ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE, ENETUNREACH,
//     EHOSTUNREACH, a *net.DNSError, io.EOF and io.ErrUnexpectedEOF are
//     network;
//  4. a *json.SyntaxError or *json.UnmarshalTypeError (the caller could
//     not parse the model's answer) is bad_output;
//  5. an error with a method StatusCode() int or HTTPStatusCode() int
//     gives an HTTP status: 429 rate_limit, 408 timeout, 401 and 403 auth,
//     400 and 422 bad_request, 404 not_found, 5xx overloaded.
//
// Then, for an error in the chain with a method RawJSON() string (the
// provider's error body, as openai-go and anthropic-sdk-go keep it), it
// reads the provider's code and type ("model_not_found",
// "context_length_exceeded", "insufficient_quota", "overloaded_error"),
// which name the class outright, else the body's message with the
// error's text, as below (see ProviderErrorOf).
//
// Then it reads the error's text (its first 1 KiB). The text is split
// into words at every character that is not a letter or digit, at
// CamelCase humps and between letters and digits, and compared word by
// word, case-insensitively: "RateLimitError" and "rate_limit_exceeded"
// are rate limits, "request 14290 failed" is not. A three-digit HTTP
// status in the text counts when it opens the message or follows "http",
// "status", "code", "error", "response", "returned", "got" or "received"
// (with only numbers between). Specific phrases (a withdrawn model, an
// exceeded context window, a content filter, a rate limit) override a
// status code, so "400: maximum context length exceeded" is
// context_length, and an Anthropic SDK's own refusal "streaming is
// required for operations that may take longer than 10 minutes" is
// bad_request; generic ones ("timeout", "refused") give way to it.
// Without any HTTP status (the caller's own error, not a provider's),
// phrases of a failed validation, parse or refusal ("does not match
// schema", "missing required property", "cannot unmarshal", "model
// refused") are bad_output; with one they stay bad_request or
// content_filter.
func Classify(err error) Class {
	if err == nil {
		return ClassOther
	}
	return classify(err, textN(err, maxClassifyText))
}

// maxClassifyText is how much of an error's text Classify reads.
const maxClassifyText = 1024

// classify is Classify with err's text already read. A panic in one of
// err's methods (Unwrap, Is, Timeout, …) gives ClassOther.
func classify(err error, text string) Class {
	class, status := classifyErr(err, text)
	if class != "" {
		return class
	}
	return classifyText(text, status)
}

// classifyErr is classify's part that reads err's chain: the class when
// the chain decides it, else "" and the HTTP status found in the chain
// (0 for none) for classifyText.
func classifyErr(err error, text string) (class Class, status int) {
	defer func() {
		if recover() != nil {
			class = ClassOther
		}
	}()
	if err != nil {
		var (
			c   Class
			ok  bool
			sc  int
			raw string
		)
		Walk(err, func(e error) bool {
			if x, is := e.(interface{ FailureClass() Class }); is {
				if c, ok = safeClass(x); ok {
					return false
				}
			}
			if sc == 0 {
				sc = statusOf(e)
			}
			if raw == "" {
				raw = rawJSONOf(e)
			}
			return true
		})
		if ok {
			return c, 0
		}
		if c := providerClass(raw, text, sc); c != "" {
			return c, 0
		}
		if c := signalClass(err); c != "" {
			return c, 0
		}
		status = sc
	}
	return "", status
}

// safeClass calls FailureClass, catching a panic.
func safeClass(x interface{ FailureClass() Class }) (c Class, ok bool) {
	defer func() {
		if recover() != nil {
			c, ok = "", false
		}
	}()
	c = x.FailureClass()
	return c, c != ""
}

// statusOf returns the HTTP status e reports through StatusCode() or
// HTTPStatusCode(), or 0.
func statusOf(e error) (code int) {
	defer func() {
		if recover() != nil {
			code = 0
		}
	}()
	switch x := e.(type) {
	case interface{ StatusCode() int }:
		code = x.StatusCode()
	case interface{ HTTPStatusCode() int }:
		code = x.HTTPStatusCode()
	}
	if code < 100 || code > 599 {
		return 0
	}
	return code
}

// signalClass classifies err by the Go errors in its chain, or returns "".
func signalClass(err error) Class {
	var canceled, timeout, network, badOutput bool
	Walk(err, func(e error) bool {
		switch e {
		case context.Canceled:
			canceled = true
			return false
		case context.DeadlineExceeded, os.ErrDeadlineExceeded:
			timeout = true
			return false
		case io.EOF, io.ErrUnexpectedEOF:
			network = true
		}
		switch x := e.(type) {
		case *json.SyntaxError, *json.UnmarshalTypeError:
			badOutput = true
		case syscall.Errno:
			switch x {
			case syscall.ETIMEDOUT:
				timeout = true
				return false
			case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
				syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN:
				network = true
			}
		case *net.DNSError:
			if x.IsTimeout {
				timeout = true
				return false
			}
			network = true
		case net.Error:
			if safeTimeout(x) {
				timeout = true
				return false
			}
		}
		// An error that says it is context.Canceled (errors.Is asks it).
		if x, ok := e.(interface{ Is(error) bool }); ok && x.Is(context.Canceled) {
			canceled = true
			return false
		}
		return true
	})
	switch {
	case canceled && !timeout:
		return ClassCanceled
	case timeout:
		return ClassTimeout
	case network:
		return ClassNetwork
	case badOutput:
		return ClassBadOutput
	}
	return ""
}

func safeTimeout(e net.Error) (t bool) {
	defer func() {
		if recover() != nil {
			t = false
		}
	}()
	return e.Timeout()
}

// statusClass maps an HTTP status to a class, or "".
func statusClass(code int) Class {
	switch {
	case code == 429:
		return ClassRateLimit
	case code == 408:
		return ClassTimeout
	case code == 401, code == 403:
		return ClassAuth
	case code == 400, code == 413, code == 422:
		return ClassBadRequest
	case code == 404, code == 410:
		return ClassNotFound
	case code >= 500 && code <= 599:
		return ClassOverloaded
	}
	return ""
}

// PermanentClasses returns the classes whose failure a retry cannot fix,
// which the loop does not retry by default (selfimprove.RetryPolicy):
// auth, bad_request, context_length, content_filter, not_found,
// model_unavailable and quota.
func PermanentClasses() []Class {
	return []Class{ClassAuth, ClassBadRequest, ClassContextLength, ClassContentFilter,
		ClassNotFound, ClassModelUnavailable, ClassQuota}
}
