// Package openai runs openai-go (github.com/openai/openai-go/v3) calls
// under the selfimprove loop: ClientOptions turn the SDK's own retries off
// and route its requests through selfimprove.Transport, Wrap turns the
// SDK's error into one whose class and wait the loop reads outright, and
// Routes maps the agent's Config.Route to a model.
package openai

import (
	"errors"
	"net/http"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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

// Error is an openai-go API error as the loop understands it: a
// selfimprove.APIError, whose Provider is "openai". It wraps the SDK's
// error: errors.As still finds it.
type Error = si.APIError

// Wrap returns err as an *Error when it is (or wraps) an *openai.Error,
// and err unchanged otherwise (nil for nil): a network error or a
// deadline is classified by selfimprove.Classify as it is.
func Wrap(err error) error {
	var ae *oai.Error
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	e := &Error{Provider: "openai", Err: err, Status: ae.StatusCode, Code: ae.Code, Type: ae.Type, Class: si.Classify(err), Message: ae.Message}
	if ae.Response != nil {
		e.Wait, _ = si.HeaderWait(ae.Response.Header, ae.StatusCode, time.Now())
	}
	if e.Wait == 0 {
		e.Wait, _ = si.ErrorWait(err)
	}
	return e
}

// DefaultFallbacks are the routes Routes.Fallbacks defaults to, in order:
// when a model is withdrawn, the built-in strategy moves the agent to the
// next one.
var DefaultFallbacks = []string{"gpt-4.1", "gpt-4o", "gpt-4o-mini"}

// Routes maps an agent's Config.Route to an OpenAI model name.
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

// routes is r with its defaults.
func (r Routes) routes() si.ModelRoutes {
	fb := r.Fallbacks
	if fb == nil {
		fb = DefaultFallbacks
	}
	return si.ModelRoutes{Default: r.Default, Models: r.Models, Fallbacks: fb}
}

// Model returns the model for cfg.Route.
func (r Routes) Model(cfg si.Config) string { return r.routes().Model(cfg) }

// Strategy returns the built-in strategy with the routes' fallbacks: a
// withdrawn model moves the agent to the next route.
func (r Routes) Strategy() *si.BuiltinStrategy { return r.routes().Strategy() }
