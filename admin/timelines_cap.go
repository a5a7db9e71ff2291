package admin

import "github.com/self-improving-loop/selfimprove"

// hasHistory reports whether the agent of o has history: a config
// change or an operator's config (a version past the first), a manual
// threshold, a critical mark, or propose-only (the last three in a full
// view only). An agent made by a report alone has none.
func hasHistory(o *selfimprove.AgentView) bool {
	return o.Config.Version > 1 || o.Manual || o.Critical || o.ProposeOnly
}

// note marks the timeline of o's agent as one of an agent with history
// when it has some. Called with p.mu held, once the timeline exists.
func (p *sampler) note(o *selfimprove.AgentView) {
	if !hasHistory(o) {
		return
	}
	if p.hist == nil {
		p.hist = map[string]struct{}{}
	}
	p.hist[o.AgentID] = struct{}{}
}

// admit makes room, when the sampler is full, for the timeline of o's
// agent if it has history: it drops the timeline of an agent without
// any (agents that only reports made never push out one with history).
// It reports whether there is room. Called with p.mu held.
func (p *sampler) admit(o *selfimprove.AgentView) bool {
	if !hasHistory(o) || len(p.hist) >= len(p.agents) {
		return false
	}
	for id := range p.agents {
		if _, ok := p.hist[id]; !ok {
			delete(p.agents, id)
			return true
		}
	}
	return false
}
