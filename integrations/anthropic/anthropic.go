// Package anthropic runs anthropic-sdk-go
// (github.com/anthropics/anthropic-sdk-go) calls
// under the selfimprove loop: ClientOptions turn the SDK's own retries off
// and route its requests through selfimprove.Transport, Wrap turns the
// SDK's error into one whose class and wait the loop reads outright, and
// DefaultRoutes maps the agent's Config.Route to a model.
package anthropic

import (
	"errors"
	"net/http"
	"slices"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
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

// Error is an anthropic-sdk-go API error as the loop understands it: a
// failure.APIError, whose Provider is "anthropic". It wraps the SDK's
// error: errors.As still finds it.
type Error = failure.APIError

// Wrap returns err as an *Error when it is (or wraps) an *anthropic.Error,
// and err unchanged otherwise (nil for nil): a network error or a
// deadline is classified by failure.Classify as it is.
func Wrap(err error) error {
	var ae *ant.Error
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	p, _ := failure.ProviderErrorOf(err)
	e := &Error{Provider: "anthropic", Err: err, Status: ae.StatusCode, Type: p.Type, Class: failure.Classify(err), Message: p.Message}
	if ae.Response != nil {
		e.Wait, _ = failure.HeaderWait(ae.Response.Header, ae.StatusCode, time.Now())
	}
	if e.Wait == 0 {
		e.Wait, _ = failure.ErrorWait(err)
	}
	return e
}

// DefaultPrimary and DefaultFallbacks are the route ladder DefaultRoutes
// gives: the primary model, then the models to fall back to, in order.
const DefaultPrimary = "claude-sonnet-4-5"

// DefaultFallbacks: see DefaultPrimary.
var DefaultFallbacks = []string{"claude-3-7-sonnet-latest", "claude-3-5-haiku-latest"}

// DefaultRoutes returns the route ladder of an agent that uses this SDK:
// selfimprove.Routes with DefaultPrimary and DefaultFallbacks. Give it to
// the loop with selfimprove.WithRoutes (or Loop.SetRoutes), and
// Routes.Model the agent's config to get the model to call.
func DefaultRoutes() si.Routes {
	return si.Routes{Primary: DefaultPrimary, Fallbacks: slices.Clone(DefaultFallbacks)}
}
