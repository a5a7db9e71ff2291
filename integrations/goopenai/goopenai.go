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
	"slices"

	goai "github.com/sashabaranov/go-openai"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
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

// Error is a go-openai API error as the loop understands it: a
// failure.APIError, whose Provider is "go-openai". It wraps the SDK's
// error: errors.As still finds it.
type Error = failure.APIError

// body is an error with a provider body, for failure.Classify.
type body struct {
	err error
	raw string
}

func (b body) Error() string   { return b.err.Error() }
func (b body) RawJSON() string { return b.raw }

// Wrap returns err as an *Error when it is (or wraps) an
// *openai.APIError or *openai.RequestError, and err unchanged otherwise
// (nil for nil): a network error or a deadline is classified by
// failure.Classify as it is.
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
		e = &Error{Provider: "go-openai", Err: err, Status: ae.HTTPStatusCode, Type: ae.Type, Message: ae.Message}
		if ae.Code != nil {
			e.Code = fmt.Sprint(ae.Code)
		}
		raw, _ := json.Marshal(map[string]string{"code": e.Code, "type": e.Type, "message": e.Message})
		e.Class = failure.Classify(body{err, string(raw)})
	case errors.As(err, &re):
		e = &Error{Provider: "go-openai", Err: err, Status: re.HTTPStatusCode, Class: failure.Classify(err)}
		if len(re.Body) <= 64<<10 {
			e.Class = failure.Classify(body{err, string(re.Body)})
			if p, ok := failure.ProviderErrorOf(body{err, string(re.Body)}); ok {
				e.Code, e.Type, e.Message = p.Code, p.Type, p.Message
			}
		}
	default:
		return err
	}
	e.Wait = failure.TextWait(e.Message)
	return e
}

// DefaultPrimary and DefaultFallbacks are the route ladder DefaultRoutes
// gives: the primary model, then the models to fall back to, in order.
const DefaultPrimary = "gpt-4.1"

// DefaultFallbacks: see DefaultPrimary.
var DefaultFallbacks = []string{"gpt-4o", "gpt-4o-mini"}

// DefaultRoutes returns the route ladder of an agent that uses this SDK:
// selfimprove.Routes with DefaultPrimary and DefaultFallbacks. Give it to
// the loop with selfimprove.WithRoutes (or Loop.SetRoutes), and
// Routes.Model the agent's config to get the model to call.
func DefaultRoutes() si.Routes {
	return si.Routes{Primary: DefaultPrimary, Fallbacks: slices.Clone(DefaultFallbacks)}
}
