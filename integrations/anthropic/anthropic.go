// Package anthropic runs anthropic-sdk-go
// (github.com/anthropics/anthropic-sdk-go) calls
// under the selfimprove loop: ClientOptions turn the SDK's own retries off
// and route its requests through selfimprove.Transport, Wrap turns the
// SDK's error into one whose class and wait the loop reads outright, and
// Routes maps the agent's Config.Route to a model.
package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
)

// ClientOptions returns the options of a client used under the loop: no
// retries of the SDK's own (option.WithMaxRetries(0)), so that the loop
// sees, classifies and paces every failure, and an HTTP client whose
// transport is selfimprove.Transport over base (nil:
// http.DefaultTransport). Add the API key, base URL and any other option
// after them.
func ClientOptions(base http.RoundTripper) []option.RequestOption {
	return []option.RequestOption{
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: si.Transport(base)}),
	}
}

// Error is an anthropic-sdk-go API error as the loop understands it. It
// wraps the SDK's *anthropic.Error: errors.As still finds it.
type Error struct {
	// Err is the SDK's error.
	Err error
	// Status is the response's HTTP status.
	Status int
	// Type is the provider's error type ("overloaded_error",
	// "rate_limit_error"); default empty.
	Type string
	// Class is the failure's class, read from Type, the message
	// and Status.
	Class si.Class
	// Wait is how long the provider asked to wait before retrying (see
	// selfimprove.HeaderWait and selfimprove.ErrorWait); default 0: none.
	Wait time.Duration
	// message is the provider's message.
	message string
}

// Wrap returns err as an *Error when it is (or wraps) an *anthropic.Error,
// and err unchanged otherwise (nil for nil): a network error or a
// deadline is classified by selfimprove.Classify as it is.
func Wrap(err error) error {
	var ae *ant.Error
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	p, _ := si.ProviderErrorOf(err)
	e := &Error{Err: err, Status: ae.StatusCode, Type: p.Type, Class: si.Classify(err), message: p.Message}
	if ae.Response != nil {
		e.Wait, _ = si.HeaderWait(ae.Response.Header, ae.StatusCode, time.Now())
	}
	if e.Wait == 0 {
		e.Wait, _ = si.ErrorWait(err)
	}
	return e
}

// Error returns the status, type, wait and the provider's message
// (at most 300 bytes of it): "anthropic: 429 rate_limit_error, retry
// after 2s: Number of request tokens has exceeded …".
func (e *Error) Error() string {
	s := fmt.Sprintf("anthropic: %d", e.Status)
	if e.Type != "" {
		s += " " + e.Type
	}
	if e.Wait > 0 {
		s += fmt.Sprintf(", retry after %v", e.Wait)
	}
	msg := e.message
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return s + ": " + msg
}

// Unwrap returns the SDK's error.
func (e *Error) Unwrap() error { return e.Err }

// FailureClass returns Class: selfimprove.Classify reads it.
func (e *Error) FailureClass() si.Class { return e.Class }

// RetryAfter returns Wait: the loop waits at least that long before the
// next attempt.
func (e *Error) RetryAfter() time.Duration { return e.Wait }

// StatusCode returns Status.
func (e *Error) StatusCode() int { return e.Status }

// DefaultFallbacks are the routes Routes.Fallbacks defaults to, in order:
// when a model is withdrawn, the built-in strategy moves the agent to the
// next one.
var DefaultFallbacks = []string{"claude-sonnet-4-5", "claude-3-7-sonnet-latest", "claude-3-5-haiku-latest"}

// Routes maps an agent's Config.Route to an Anthropic model name.
type Routes struct {
	// Default is the model for an empty Route. Default "": the first
	// of the fallbacks.
	Default string
	// Models maps a route to a model; a route not in it is the model's
	// own name. Default nil.
	Models map[string]string
	// Fallbacks are the routes to move to, in order, when the model is
	// unavailable. Default nil: DefaultFallbacks.
	Fallbacks []string
}

func (r Routes) fallbacks() []string {
	if r.Fallbacks == nil {
		return DefaultFallbacks
	}
	return r.Fallbacks
}

// Model returns the model for cfg.Route.
func (r Routes) Model(cfg si.Config) string {
	route := cfg.Route
	if route == "" {
		route = r.Default
	}
	if route == "" {
		if fb := r.fallbacks(); len(fb) > 0 {
			route = fb[0]
		}
	}
	if m, ok := r.Models[route]; ok {
		return m
	}
	return route
}

// Strategy returns the built-in strategy with the routes' fallbacks: a
// withdrawn model moves the agent to the next route.
func (r Routes) Strategy() *si.BuiltinStrategy {
	return &si.BuiltinStrategy{Fallbacks: r.fallbacks()}
}
