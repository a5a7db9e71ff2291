package selfimprove

import (
	"context"
	"maps"
	"slices"
)

// RouteLimits is what a route's model supports (Routes.Limits), so that a
// request the model must reject never goes to it. The zero RouteLimits
// knows of no limit: any request fits.
type RouteLimits struct {
	// ContextTokens is the model's context window, in tokens: the
	// request's prompt and its output together (Needs.Tokens). Default 0:
	// unknown, any request fits.
	ContextTokens int
	// NoTools: the model rejects a request that offers tools; NoPrefill,
	// one that ends with the assistant's own words to continue (Claude's
	// prefill); NoStream, a streamed one. Default false: supported.
	NoTools, NoPrefill, NoStream bool
}

// Needs is what a request needs of the route that serves it, given to the
// loop with WithNeeds (the integrations modules' NeedsOf estimate it from
// an SDK's request). The zero Needs fits any route.
type Needs struct {
	// Tokens is the request's size in tokens, its prompt and the most it
	// may answer (max_tokens) together; 0: unknown.
	Tokens int
	// Tools: the request offers tools; Prefill: it ends with an assistant
	// message to continue; Stream: it is streamed.
	Tools, Prefill, Stream bool
}

// needsKey is the context key of a call's Needs.
type needsKey struct{}

// WithNeeds returns ctx carrying n, what the request of the call made
// under it needs of a route. With routes that declare their limits
// (Routes.Limits), the call runs on the first route of its agent's ladder
// that fits n when its own does not, from its own route down, then from
// the primary (a move for this call alone: the agent's route does not
// change, and its route is not counted as failing); its fallbacks skip
// the routes that do not fit; when none fits, it runs on its own route and
// the provider has the last word. A request the provider finds too long
// (failure.ClassContextLength) goes on to a route with a larger declared
// window, never to the same model again, and fails at once with the
// provider's error when none is left. Without WithNeeds every route fits.
func WithNeeds(ctx context.Context, n Needs) context.Context {
	return context.WithValue(ctx, needsKey{}, &n)
}

// needsOf returns the Needs ctx carries, or nil.
func needsOf(ctx context.Context) *Needs {
	n, _ := ctx.Value(needsKey{}).(*Needs)
	return n
}

// fits reports whether a request with needs n (nil: none known) fits the
// route whose limits are lim.
func (lim *RouteLimits) fits(n *Needs) bool {
	return n == nil || lim.ContextTokens == 0 || n.Tokens <= lim.ContextTokens ||
		n.Tokens == 0 // unknown size: the provider decides
}

// fitsAll is fits, and the request's features the route supports.
func (lim *RouteLimits) fitsAll(n *Needs) bool {
	return lim.fits(n) && (n == nil || !(n.Tools && lim.NoTools || n.Prefill && lim.NoPrefill || n.Stream && lim.NoStream))
}

// fit reports whether route fits n on r, whose Limits it reads.
func (r *Routes) fit(route string, n *Needs) bool {
	if n == nil || r == nil {
		return true
	}
	lim, ok := r.Limits[r.name(route)]
	return !ok || lim.fitsAll(n)
}

// window returns route's declared context window on r (0: unknown).
func (r *Routes) window(route string) int {
	if r == nil {
		return 0
	}
	return r.Limits[r.name(route)].ContextTokens
}

// larger reports whether route r may take a request that route from
// found too long: another model, whose declared window, if both are
// declared, is larger.
func (r *Routes) larger(to, from string) bool {
	if r.Model(Config{Route: to}) == r.Model(Config{Route: from}) {
		return false
	}
	w, was := r.window(to), r.window(from)
	return w == 0 || was == 0 || w > was
}

// maxLimits bounds Routes.Limits.
const maxLimits = 64

// validateLimits reports whether r's Limits are valid: the error names
// the entry.
func (r *Routes) validateLimits() error {
	if n := len(r.Limits); n > maxLimits {
		return fieldErr("Limits", "%d entries, more than %d", n, maxLimits)
	}
	var err error
	for _, k := range slices.Sorted(maps.Keys(r.Limits)) {
		name := "Limits[" + quoteCut(k, maxQuoted) + "]"
		err = firstErr(err, checkText(name+" route", k, maxRouteLen))
		if t := r.Limits[k].ContextTokens; t < 0 {
			err = firstErr(err, fieldErr(name+".ContextTokens", "%d is negative", t))
		}
	}
	return err
}
