// Package goopenai runs go-openai (github.com/sashabaranov/go-openai)
// calls under the selfimprove loop: ClientConfig routes the client's
// requests through selfimprove.Transport (go-openai makes no retries of
// its own), Wrap turns the SDK's error into one whose class and wait the
// loop reads outright, and Routes maps the agent's Config.Route to a
// model.
package goopenai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	goai "github.com/sashabaranov/go-openai"
	si "github.com/self-improving-loop/selfimprove"
)

// ClientConfig returns go-openai's default config for token whose HTTP
// client's transport is selfimprove.Transport over base (nil:
// http.DefaultTransport): through it the loop reads each failed
// response's status and Retry-After and rate-limit headers, which
// go-openai's errors do not carry. Set BaseURL and the rest on the
// result.
func ClientConfig(token string, base http.RoundTripper) goai.ClientConfig {
	c := goai.DefaultConfig(token)
	c.HTTPClient = &http.Client{Transport: si.Transport(base)}
	return c
}

// Error is a go-openai API error as the loop understands it. It wraps the
// SDK's *openai.APIError or *openai.RequestError: errors.As still finds
// it.
type Error struct {
	// Err is the SDK's error.
	Err error
	// Status is the response's HTTP status.
	Status int
	// Code and Type are the provider's error code and type
	// ("model_not_found", "invalid_request_error"); default empty.
	Code, Type string
	// Class is the failure's class, read from Code, Type, the message
	// and Status.
	Class si.Class
	// Wait is how long the provider's message asked to wait before
	// retrying ("Please try again in 20s"); default 0: none. The
	// response's headers reach the loop through ClientConfig's
	// transport instead.
	Wait time.Duration
	// message is the provider's message.
	message string
}

// body is an error with a provider body, for selfimprove.Classify.
type body struct {
	err error
	raw string
}

func (b body) Error() string   { return b.err.Error() }
func (b body) RawJSON() string { return b.raw }

// Wrap returns err as an *Error when it is (or wraps) an
// *openai.APIError or *openai.RequestError, and err unchanged otherwise
// (nil for nil): a network error or a deadline is classified by
// selfimprove.Classify as it is.
func Wrap(err error) error {
	var (
		ae *goai.APIError
		re *goai.RequestError
		e  *Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		e = &Error{Err: err, Status: ae.HTTPStatusCode, Type: ae.Type, message: ae.Message}
		if ae.Code != nil {
			e.Code = fmt.Sprint(ae.Code)
		}
		raw, _ := json.Marshal(map[string]string{"code": e.Code, "type": e.Type, "message": e.message})
		e.Class = si.Classify(body{err, string(raw)})
	case errors.As(err, &re):
		e = &Error{Err: err, Status: re.HTTPStatusCode, Class: si.Classify(err)}
		if len(re.Body) <= 64<<10 {
			e.Class = si.Classify(body{err, string(re.Body)})
			if p, ok := si.ProviderErrorOf(body{err, string(re.Body)}); ok {
				e.Code, e.Type, e.message = p.Code, p.Type, p.Message
			}
		}
	default:
		return err
	}
	e.Wait = si.TextWait(e.message)
	return e
}

// Error returns the status, code, type, wait and the provider's message
// (at most 300 bytes of it): "go-openai: 404 model_not_found
// (invalid_request_error): The model … does not exist".
func (e *Error) Error() string {
	s := fmt.Sprintf("go-openai: %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Type != "" {
		s += " (" + e.Type + ")"
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
var DefaultFallbacks = []string{"gpt-4.1", "gpt-4o", "gpt-4o-mini"}

// Routes maps an agent's Config.Route to an OpenAI model name.
type Routes struct {
	// Default is the model for an empty Route. Default "": the first of
	// the fallbacks.
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
