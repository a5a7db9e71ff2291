package selfimprove

import "sync"

// A shared outage closes the circuits it opened as soon as it is over.
// The loop indexes the agents whose circuit the breaker opened by the
// cluster of the failure that opened it (the same upstream error on many
// agents is one cluster). While n agents are open for one cause, the
// cause is probed once per cool-off ÷ n, by whichever of them calls first
// (as many probes as n agents probing once per cool-off each, spread out
// instead of in step); when a probe succeeds, every other agent open for
// that cause probes at its next call instead of after its own cool-off.
// At one call a minute, a cool-off of 10 calls would otherwise fail up to
// 10 of each agent's calls fast after the upstream came back. An agent
// whose upstream is still down fails its probe and opens again. The index
// lives in memory: after a restart each agent waits for its own cool-off.

// maxOpenCircuits bounds the index: beyond it, an agent whose circuit
// opens waits for its own cool-off alone.
const maxOpenCircuits = 1 << 16

// openCircuits is the index of open circuits by cause.
type openCircuits struct {
	mu    sync.Mutex
	by    map[uint64]*causeCircuits
	cause map[*agent]uint64
}

// causeCircuits is the agents open for one cause, and the cause's probes.
type causeCircuits struct {
	agents map[*agent]struct{}
	// next is when the cause's next probe is due, coolOff the cool-off
	// of the latest agent opened for it (Unix ns, ns).
	next, coolOff int64
}

// opened records that a's circuit opened (or opened again) for cluster at
// now, for coolOff.
func (o *openCircuits) opened(a *agent, cluster uint64, now, coolOff int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by, o.cause = make(map[uint64]*causeCircuits), make(map[*agent]uint64)
	}
	if old, ok := o.cause[a]; ok {
		o.drop(a, old)
	} else if len(o.cause) >= maxOpenCircuits {
		return
	}
	c := o.by[cluster]
	if c == nil {
		c = &causeCircuits{agents: make(map[*agent]struct{}), next: now + coolOff}
		o.by[cluster] = c
	}
	c.agents[a] = struct{}{}
	c.coolOff = coolOff
	c.next = min(c.next, now+coolOff/int64(len(c.agents)))
	o.cause[a] = cluster
}

// drop removes a from the agents open for cluster. o.mu is held.
func (o *openCircuits) drop(a *agent, cluster uint64) {
	delete(o.cause, a)
	if c := o.by[cluster]; c != nil {
		delete(c.agents, a)
		if len(c.agents) == 0 {
			delete(o.by, cluster)
		}
	}
}

// turn reports whether a call of a at now may probe for the cause a's
// circuit is open for, before a's own cool-off ends: the cause is shared
// by other open agents and its next probe is due.
func (o *openCircuits) turn(a *agent, now int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	cluster, ok := o.cause[a]
	if !ok {
		return false
	}
	c := o.by[cluster]
	if len(c.agents) < 2 || now < c.next {
		return false
	}
	c.next = now + c.coolOff/int64(len(c.agents))
	return true
}

// recovered records that a's probe succeeded: it returns the other
// agents open for the same cause, which leave the index.
func (o *openCircuits) recovered(a *agent) []*agent {
	o.mu.Lock()
	defer o.mu.Unlock()
	cluster, ok := o.cause[a]
	if !ok {
		return nil
	}
	o.drop(a, cluster)
	c := o.by[cluster]
	if c == nil {
		return nil
	}
	out := make([]*agent, 0, len(c.agents))
	for b := range c.agents {
		out = append(out, b)
		delete(o.cause, b)
	}
	delete(o.by, cluster)
	return out
}

// probeSoon lets a's next call probe its open circuit at once (now, Unix
// ns), unless the circuit has closed, a is no longer in memory, or it is
// held for an account-wide cause (whose probes have their own schedule).
// Only the calls' mirror moves: the probe's outcome then closes the
// circuit or opens it again, as any probe does.
func (a *agent) probeSoon(now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.evicted || a.s.openUntil(now) <= now || a.held() {
		return
	}
	a.openUntil.Store(now)
}

// held reports whether a is held for an account-wide cause. a.mu is held.
func (a *agent) held() bool { return a.s.Route != nil && a.s.Route.Hold != "" }
