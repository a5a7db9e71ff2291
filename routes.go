package selfimprove

// Routes maps an agent's Config.Route to a model name, for the
// integrations modules: the route is a model, or a name Models maps to
// one, and Fallbacks are the routes the built-in strategy moves a
// withdrawn model's agents to, in order.
type Routes struct {
	// Default is the model for an empty Route. Default "": the first of
	// the fallbacks.
	Default string
	// Models maps a route to a model; a route not in it is the model's own
	// name. Default nil.
	Models map[string]string
	// Fallbacks are the routes to move to, in order, when the model is
	// unavailable. Default nil: none (each integration's Routes supplies
	// its own list).
	Fallbacks []string
}

// Model returns the model for cfg.Route.
func (r Routes) Model(cfg Config) string {
	route := cfg.Route
	if route == "" {
		route = r.Default
	}
	if route == "" && len(r.Fallbacks) > 0 {
		route = r.Fallbacks[0]
	}
	if m, ok := r.Models[route]; ok {
		return m
	}
	return route
}

// Strategy returns the built-in strategy with the routes' fallbacks: a
// withdrawn model moves the agent to the next route.
func (r Routes) Strategy() *BuiltinStrategy {
	return &BuiltinStrategy{Fallbacks: r.Fallbacks}
}
