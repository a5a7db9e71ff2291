package failure

import (
	"fmt"
	"time"
)

// APIError is a provider's API error as the loop understands it: what the
// Wrap functions of the integrations modules (integrations/openai,
// integrations/anthropic, integrations/goopenai) return. It wraps the
// SDK's error, which errors.As still finds, and tells Classify its class
// (FailureClass) and the loop its wait (RetryAfter) outright.
type APIError struct {
	// Provider names the SDK in the message ("openai", "anthropic",
	// "go-openai"); default empty.
	Provider string
	// Err is the SDK's error.
	Err error
	// Status is the response's HTTP status.
	Status int
	// Code and Type are the provider's error code and type
	// ("model_not_found", "invalid_request_error", "overloaded_error");
	// default empty when the body has none.
	Code, Type string
	// Class is the failure's class, read from Code, Type, the message and
	// Status.
	Class Class
	// Wait is how long the provider asked to wait before retrying (see
	// HeaderWait and ErrorWait); default 0: none.
	Wait time.Duration
	// Message is the provider's message; default empty.
	Message string
}

// maxAPIErrorMessage bounds the provider's message in APIError.Error.
const maxAPIErrorMessage = 300

// Error returns the provider, status, code and type, wait and the
// provider's message (at most 300 bytes of it): "openai: 404
// model_not_found (invalid_request_error): The model …", "anthropic: 429
// rate_limit_error, retry after 2s: Number of request tokens …".
func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: %d", e.Provider, e.Status)
	switch {
	case e.Code != "" && e.Type != "":
		s += " " + e.Code + " (" + e.Type + ")"
	case e.Code != "":
		s += " " + e.Code
	case e.Type != "":
		s += " " + e.Type
	}
	if e.Wait > 0 {
		s += fmt.Sprintf(", retry after %v", e.Wait)
	}
	msg := e.Message
	if len(msg) > maxAPIErrorMessage {
		msg = msg[:cutAt(msg, maxAPIErrorMessage)] + "…"
	}
	return s + ": " + msg
}

// Unwrap returns the SDK's error.
func (e *APIError) Unwrap() error { return e.Err }

// FailureClass returns Class: Classify reads it.
func (e *APIError) FailureClass() Class { return e.Class }

// RetryAfter returns Wait: the loop waits at least that long before the
// next attempt.
func (e *APIError) RetryAfter() time.Duration { return e.Wait }

// StatusCode returns Status.
func (e *APIError) StatusCode() int { return e.Status }
