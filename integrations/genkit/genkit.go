// Package genkit runs Genkit Go (github.com/firebase/genkit/go) model
// calls under the selfimprove loop. Middleware returns an
// ai.ModelMiddleware, given to genkit.Generate (or a prompt, or a flow's
// calls) with ai.WithMiddleware: each call of the model, each turn of a
// tool loop included, runs through Loop.ExecuteWithImprovement, under
// the agent's config:
//
//   - Config.Route picks the model, through Options.Routes (the route
//     ladder): a route that names a model calls that model of
//     Options.Genkit's registry (genkit.LookupModel) with the request;
//   - Config.Timeout, MaxAttempts and Backoff are enforced by the loop:
//     give the OpenAI-compatible plugin ClientOptions, which turn
//     openai-go's own retries off;
//   - the provider's errors are mapped (Wrap) so that the loop sees the
//     status, the error code and the Retry-After headers;
//   - a streamed call reports its first chunk to the loop
//     (stream.FirstToken), so Config.FirstTokenTimeout bounds the wait for
//     it; through ClientOptions, a stream that ends without "data: [DONE]"
//     is a failure, retried;
//   - Options.Check fails an answer the caller cannot use as a bad output
//     (failure.BadOutput), which the loop retries.
//
// The agent ID is Options.AgentID, one per middleware (make one per
// agent or flow), unless the call's context names another (WithAgentID).
//
// Genkit v1.4 (the newest the module proxy has) has no ai.Middleware
// with WrapModel nor WithUse; ai.ModelMiddleware with ai.WithMiddleware
// is its hook for model calls.
package genkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/oaicompat"
	"github.com/self-improving-loop/selfimprove/stream"
)

// Options configures Middleware.
type Options struct {
	// AgentID is the agent the calls are booked under, unless a call's
	// context names another (WithAgentID). Required.
	AgentID string
	// Routes maps the agent's Config.Route to the model to call
	// (Routes.Model), by its Genkit name ("openai/gpt-4o"). Default zero:
	// Config.Route itself is the model when set; with no route, the call
	// keeps the model the caller chose. Give the loop the same ladder
	// (selfimprove.WithRoutes or Loop.SetRoutes) for it to move the agent
	// down it and back.
	Routes si.Routes
	// Genkit is the registry the models of the routes are looked up in.
	// Required when a route names a model.
	Genkit *genkit.Genkit
	// Check, when not nil, checks each answer: an error fails the
	// attempt as a bad output (failure.BadOutput), which the loop
	// retries at once. Default nil: every answer is taken.
	Check func(*ai.ModelResponse) error
}

// ErrNoAgentID is returned by Middleware for Options without an AgentID.
var ErrNoAgentID = errors.New("genkit adapter: Options.AgentID is required")

// ErrNoModel is the error of a call whose route names a model that
// Options.Genkit does not have (or Options.Genkit nil).
var ErrNoModel = errors.New("genkit adapter: no such model")

type agentKey struct{}

// WithAgentID returns ctx with the agent ID the calls made with it are
// booked under, instead of Options.AgentID: a flow step's own ID.
func WithAgentID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, agentKey{}, id)
}

// Middleware returns the ai.ModelMiddleware that runs each model call
// through loop. Put it last in ai.WithMiddleware: a route that names
// another model calls that model directly, not the middleware after it.
// A streamed call hands the callback each attempt's chunks: a retried
// attempt streams again from the start.
func Middleware(loop *si.Loop, o Options) (ai.ModelMiddleware, error) {
	if o.AgentID == "" {
		return nil, ErrNoAgentID
	}
	return func(next ai.ModelFunc) ai.ModelFunc {
		return func(ctx context.Context, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
			id, _ := ctx.Value(agentKey{}).(string)
			if id == "" {
				id = o.AgentID
			}
			var out *ai.ModelResponse
			_, err := loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
				resp, err := o.attempt(ctx, next, cfg, req, cb)
				if err == nil && o.Check != nil {
					if cerr := o.Check(resp); cerr != nil {
						return failure.BadOutput(cerr)
					}
				}
				if err == nil {
					out = resp
				}
				return err
			})
			return out, err
		}
	}, nil
}

// attempt makes one call: on the model the config's route names, else
// next.
func (o Options) attempt(ctx context.Context, next ai.ModelFunc, cfg si.Config, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
	name := cfg.Route
	if o.Routes.Primary != "" || len(o.Routes.Models) > 0 {
		name = o.Routes.Model(cfg)
	}
	fn := next
	if name != "" {
		var m ai.Model
		if o.Genkit != nil {
			m = genkit.LookupModel(o.Genkit, name)
		}
		if m == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoModel, name)
		}
		fn = m.Generate
	}
	return Generate(ctx, fn, req, cb)
}

// Generate makes one attempt with fn (a model's Generate, or the next
// ai.ModelFunc): it reports the first streamed chunk that carries content
// to the loop, maps the error (Wrap) and, for a stream read through a
// client made with ClientOptions, fails one that ended without
// "data: [DONE]" (stream.ErrTruncated) and maps its end as the SDK
// adapters do (stream.End). It is what Middleware runs in the loop's fn;
// use it in a fn of your own.
func Generate(ctx context.Context, fn ai.ModelFunc, req *ai.ModelRequest, cb ai.ModelStreamCallback) (*ai.ModelResponse, error) {
	if cb == nil {
		resp, err := fn(ctx, req, nil)
		return resp, Wrap(err)
	}
	w := &oaicompat.Capture{Stream: true}
	first := false
	resp, err := fn(w.Context(ctx), req, func(ctx2 context.Context, c *ai.ModelResponseChunk) error {
		if !first && len(c.Content) > 0 {
			first = true
			stream.FirstToken(ctx)
		}
		return cb(ctx2, c)
	})
	err = Wrap(err)
	body := w.Watched()
	if body == nil {
		if err != nil && ctx.Err() != nil {
			err = stream.End(ctx, err, false)
		}
		return resp, err
	}
	if err = stream.End(ctx, err, body.Final()); err != nil {
		return nil, err
	}
	return resp, nil
}
