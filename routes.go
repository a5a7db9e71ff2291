package selfimprove

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Routes is an agent's route ladder: the route it starts on, the
// fallbacks the loop may move it to, in order, and, for the integrations
// modules, the model each route names.
//
// A route is a string the wrapped function reads from Config.Route: a
// model, or a name Models maps to one. The empty Route is the primary.
// Give the loop the ladder with WithRoutes (every agent) or
// Loop.SetRoutes (one agent); the built-in strategy then moves an agent
// down the ladder when its route keeps failing for a cause another route
// can fix, probes the primary while it is away, and returns to it once it
// answers again (see ProbePolicy). A route that answered "no such model"
// is dead for ProbePolicy.DeadFor: no strategy move, rollback or return
// installs it, and the probes of it wait until that time has passed.
//
// The zero Routes is an empty ladder: the loop never changes a route.
type Routes struct {
	// Primary is the route an agent starts on and returns to; the empty
	// Config.Route means it. Default "": the wrapped function's own
	// default model (a choice: a ladder need not name the model fn
	// picks; views and events then show the primary as "").
	Primary string
	// Fallbacks are the routes to move to, in order: each non-empty,
	// listed once, and not the primary (New refuses a ladder that breaks
	// this, naming the entry). Default nil: none; at most 15.
	Fallbacks []string
	// Models maps a route to a model; a route not in it is the model's own
	// name. Default nil; at most 64 entries.
	Models map[string]string
	// Limits gives what a route's model supports, by route (see
	// RouteLimits and WithNeeds): a call never goes to a route its
	// request does not fit. Default nil: every route takes every request;
	// at most 64 entries.
	Limits map[string]RouteLimits
	// Off keeps an agent off every ladder: Loop.SetRoutes(id,
	// Routes{Off: true}) runs agent id on its config's route alone,
	// whatever WithRoutes says (a tool agent that calls no model, say).
	// Default false. Off with any other field set is refused, as is Off
	// given to WithRoutes.
	Off bool
}

// Every route, and every model Models names, is at most 256 bytes of
// UTF-8, as Config.Route.

// Model returns the model for cfg.Route: the primary's for an empty
// Route, mapped through Models.
func (r Routes) Model(cfg Config) string {
	route := r.name(cfg.Route)
	if m, ok := r.Models[route]; ok {
		return m
	}
	return route
}

// name is route's name on the ladder: the primary for "".
func (r *Routes) name(route string) string {
	if route == "" {
		return r.Primary
	}
	return route
}

// ladder returns the primary and the fallbacks, each once, in order.
func (r *Routes) ladder() []string {
	out := make([]string, 0, 1+len(r.Fallbacks))
	out = append(out, r.Primary)
	for _, f := range r.Fallbacks {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// empty reports whether the ladder has nowhere to move to.
func (r *Routes) empty() bool {
	return r == nil || len(r.ladder()) < 2
}

// maxRoutes bounds a ladder: a primary and 15 fallbacks.
const maxRoutes = 16

// maxModels bounds Routes.Models.
const maxModels = 64

// validate reports whether r can be used as a ladder: the error names
// the field out of bounds.
func (r Routes) validate() error {
	if n := len(r.Fallbacks); n > maxRoutes-1 {
		return fieldErr("Fallbacks", "%d routes, more than %d", n, maxRoutes-1)
	}
	if n := len(r.Models); n > maxModels {
		return fieldErr("Models", "%d entries, more than %d", n, maxModels)
	}
	err := checkText("Primary", r.Primary, maxRouteLen)
	for i, f := range r.Fallbacks {
		name := fmt.Sprintf("Fallbacks[%d]", i)
		switch {
		case f == "":
			err = firstErr(err, fieldErr(name, "empty: the empty route is the primary"))
		case f == r.Primary:
			err = firstErr(err, fieldErr(name, "%q is the primary", f))
		case slices.Index(r.Fallbacks, f) < i:
			err = firstErr(err, fieldErr(name, "%q is listed twice", f))
		}
		err = firstErr(err, checkText(name, f, maxRouteLen))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Models)) {
		name := "Models[" + quoteCut(k, maxQuoted) + "]"
		err = firstErr(err, checkText(name+" route", k, maxRouteLen), checkText(name, r.Models[k], maxRouteLen))
	}
	if r.Off && (r.Primary != "" || len(r.Fallbacks) > 0 || len(r.Models) > 0 || len(r.Limits) > 0) {
		err = firstErr(err, fieldErr("Off", "set beside a ladder: Off keeps the agent off every ladder"))
	}
	return firstErr(err, r.validateLimits())
}

// clone returns r with its own slices and maps.
func (r Routes) clone() Routes {
	r.Fallbacks = slices.Clone(r.Fallbacks)
	r.Models = maps.Clone(r.Models)
	r.Limits = maps.Clone(r.Limits)
	return r
}

// routeBook holds the Loop's ladders: the default and each agent's own,
// read without a lock (an immutable map, replaced whole).
type routeBook struct {
	def *Routes // nil: no ladder
	mu  sync.Mutex
	per atomic.Pointer[map[string]*Routes]
}

// of returns the agent's ladder, or nil.
func (b *routeBook) of(agentID string) *Routes {
	if b == nil {
		return nil
	}
	if m := b.per.Load(); m != nil {
		if r, ok := (*m)[agentID]; ok {
			if r.Off {
				return nil // kept off the ladder
			}
			return r
		}
	}
	return b.def
}

// own returns agentID's own entry (Off included), or nil.
func (b *routeBook) own(agentID string) *Routes {
	if b == nil {
		return nil
	}
	if m := b.per.Load(); m != nil {
		return (*m)[agentID]
	}
	return nil
}

// set gives agentID its own ladder r, or removes it (nil).
func (b *routeBook) set(agentID string, r *Routes) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]*Routes{}
	if old := b.per.Load(); old != nil {
		maps.Copy(m, *old)
	}
	if r == nil {
		delete(m, agentID)
	} else {
		m[agentID] = r
	}
	b.per.Store(&m)
}
