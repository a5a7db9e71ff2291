package selfimprove

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// ProbePolicy says how the loop looks for a way back, without sending
// doomed requests. The zero value takes the defaults; see WithProbes.
//
// Returning to the primary: when the loop has moved an agent off its
// primary route (see Routes) for a transient cause (overload, 5xx,
// timeouts, network), the move is temporary. Once the move is confirmed,
// one call per interval is a probe: its first attempt runs on the
// primary; if that fails, the call goes on under the agent's config, so
// the caller pays a few milliseconds, not a failure. A good probe makes
// the return a change like any other, verified and rolled back if the
// primary fails again; a failed probe or a rolled-back return doubles the
// interval, from Every to MaxEvery. So there is at most one return
// attempt per interval.
//
// Holding: quota, billing, auth and permission failures
// (failure.ClassQuota, failure.ClassAuth) do not pass by retrying. After
// two in a row, the agent is held: its calls fail at once with an error
// for which errors.Is(err, ErrCircuitOpen) is true and failure.Classify
// gives the class, and are not counted, except one probe per interval (Every,
// doubling to MaxEvery), whose success releases the agent. The first
// agent held for a cause (its failure cluster) raises one
// EventAccountCause and one proposal for the cause; other agents held for
// the same cause join it silently, and EventAccountRecovered follows when
// the last is released. Holding is on for both classes unless NoHold
// lists them.
//
// Dead routes: a call that failed with failure.ClassModelUnavailable, or
// failure.ClassNotFound on an agent with a ladder, marks its route dead,
// for every agent of the Loop (and, with WithFleet, of every replica),
// for DeadFor, with an EventRouteDead. No
// strategy move, rollback or return installs a dead route: a rollback
// whose target is dead moves on to the next live route of the ladder, or
// keeps the config under verification and files a proposal. A move off a
// dead route is temporary all the same: the first probe of the route
// waits until it is no longer dead (a withdrawn model may be reinstated);
// a probe that finds it dead again marks it for another DeadFor.
type ProbePolicy struct {
	// Every is the first interval between probes. Default 1 minute; at
	// most 24 hours.
	Every time.Duration
	// MaxEvery caps the interval as it doubles. Default 8 minutes (Every
	// if longer); at most 24 hours, and not below Every.
	MaxEvery time.Duration
	// ReturnEvery is the first interval between the probes of the
	// primary route while an agent is away from it, from the move on
	// (not once the move is confirmed): each probe that fails makes the
	// next interval 1.5 times longer, up to MaxEvery, each counted from
	// when the last was due; a good probe brings the agent back (one more
	// in a row for each return rolled back since it went away, up to 3).
	// It is also how long a route that left a call without an answer
	// cools down: the agent's calls skip it meanwhile. Default 5 seconds;
	// at most 24 hours.
	ReturnEvery time.Duration
	// DeadFor is how long a route stays dead. Default 24 hours; at most
	// 366 days.
	DeadFor time.Duration
	// NoHold lists the classes, among quota and auth, whose failures do
	// not hold an agent: its calls keep running, and each such failure
	// is a failure like any other. Default none; another class is
	// refused.
	NoHold []failure.Class
}

// maxProbeEvery bounds Every and MaxEvery.
const maxProbeEvery = 24 * time.Hour

// validate checks p's fields against their bounds.
func (p ProbePolicy) validate() error {
	err := firstErr(
		inRange("Every", p.Every, 0, maxProbeEvery),
		inRange("MaxEvery", p.MaxEvery, 0, maxProbeEvery),
		inRange("ReturnEvery", p.ReturnEvery, 0, maxProbeEvery),
		inRange("DeadFor", p.DeadFor, 0, maxWindow),
	)
	if d := p.withDefaults(); err == nil && d.MaxEvery < d.Every {
		err = fieldErr("MaxEvery", "%v, below Every %v", d.MaxEvery, d.Every)
	}
	for i, c := range p.NoHold {
		if err == nil && c != failure.ClassQuota && c != failure.ClassAuth {
			err = fieldErr(fmt.Sprintf("NoHold[%d]", i), "%s, not %s or %s", quoteCut(string(c), maxQuoted), failure.ClassQuota, failure.ClassAuth)
		}
	}
	return err
}

// withDefaults fills in p's zero fields.
func (p ProbePolicy) withDefaults() ProbePolicy {
	if p.Every == 0 {
		p.Every = time.Minute
	}
	if p.MaxEvery == 0 {
		p.MaxEvery = max(8*time.Minute, p.Every)
	}
	if p.DeadFor == 0 {
		p.DeadFor = 24 * time.Hour
	}
	if p.ReturnEvery == 0 {
		p.ReturnEvery = defaultReturnEvery
	}
	return p
}

// defaultReturnEvery is ProbePolicy.ReturnEvery's default.
const defaultReturnEvery = 5 * time.Second

// nextReturn is the interval between probes of the primary after every:
// 1.5 times longer, from ReturnEvery up to MaxEvery.
func (p *ProbePolicy) nextReturn(every time.Duration) time.Duration {
	return min(max(every*3/2, p.ReturnEvery), max(p.MaxEvery, p.ReturnEvery))
}

// holds reports whether failures of class hold an agent.
func (p *ProbePolicy) holds(class failure.Class) bool {
	return (class == failure.ClassQuota || class == failure.ClassAuth) && !slices.Contains(p.NoHold, class)
}

// next is the interval after every, doubled up to MaxEvery.
func (p *ProbePolicy) next(every time.Duration) time.Duration {
	if every <= 0 {
		return p.Every
	}
	return min(every*2, p.MaxEvery)
}

// holdRun is how many failures of a held class in a row hold an agent.
const holdRun = 2

// holdError is the error of a call the loop did not run because its
// agent is held for an account-wide cause (see ProbePolicy): quota,
// billing, auth. errors.Is(err, ErrCircuitOpen) is true for it, and
// failure.Classify gives its Class.
type holdError struct {
	AgentID string
	// Class is the cause's class: failure.ClassQuota or
	// failure.ClassAuth.
	Class failure.Class
	// Until is when the next probe may run.
	Until time.Time
}

func (e *holdError) Error() string {
	return fmt.Sprintf("selfimprove: agent %q held for %s until %s: the account cannot serve it (one probe per interval)",
		e.AgentID, e.Class, e.Until.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrCircuitOpen.
func (e *holdError) Is(target error) bool { return target == ErrCircuitOpen }

// FailureClass returns the cause's class, for failure.Classify.
func (e *holdError) FailureClass() failure.Class { return e.Class }

// deadBook is the Loop's dead routes, read by the state machine without a
// lock: an immutable map, replaced whole.
type deadBook struct {
	mu  sync.Mutex
	cur atomic.Pointer[map[string]deadRoute]
}

// deadRoute is a dead route's deadline (Unix ns), reason, and the class
// of the failure that found it dead.
type deadRoute struct {
	Until int64
	Why   string
	Class failure.Class
}

// maxDeadRoutes bounds the Loop's dead routes; the one nearest its end
// goes first.
const maxDeadRoutes = 256

// mark marks route dead until until.
func (b *deadBook) mark(route string, until int64, why string, class failure.Class, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.cur.Load()
	m := make(map[string]deadRoute, 1)
	if old != nil {
		for k, v := range *old {
			if v.Until > now {
				m[k] = v
			}
		}
	}
	m[route] = deadRoute{until, why, class}
	for len(m) > maxDeadRoutes {
		first := ""
		for k, v := range m {
			if first == "" || v.Until < m[first].Until {
				first = k
			}
		}
		delete(m, first)
	}
	b.cur.Store(&m)
}

// dead returns the route's entry when it is dead at now.
func (b *deadBook) dead(route string, now int64) (deadRoute, bool) {
	m := b.cur.Load()
	if m == nil {
		return deadRoute{}, false
	}
	d, ok := (*m)[route]
	return d, ok && d.Until > now
}

// list returns the routes dead at now, by route.
func (b *deadBook) list(now int64) []DeadRoute {
	m := b.cur.Load()
	if m == nil {
		return nil
	}
	var out []DeadRoute
	for k, v := range *m {
		if v.Until > now {
			out = append(out, DeadRoute{Route: k, Until: time.Unix(0, v.Until).UTC(), Reason: v.Why})
		}
	}
	slices.SortFunc(out, func(a, b DeadRoute) int { return strings.Compare(a.Route, b.Route) })
	return out
}

// causeBook is the account-wide causes in force: the agents held for
// each, by cluster ID.
type causeBook struct {
	mu sync.Mutex
	m  map[string]*cause
}

type cause struct {
	class   failure.Class
	agents  map[string]struct{}
	renewed int64 // Unix ns: when its fleet note was last sent
}

// maxCauses and maxCauseAgents bound the causes in force and the agents
// each names.
const (
	maxCauses      = 256
	maxCauseAgents = 4096
)

// join adds agentID to the cause cluster; first is true when the cause
// is new.
func (b *causeBook) join(cluster string, class failure.Class, agentID string, now int64) (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.m[cluster]
	if c == nil {
		if len(b.m) >= maxCauses {
			return false // counted as known: better no alert than a flood
		}
		if b.m == nil {
			b.m = map[string]*cause{}
		}
		c = &cause{class: class, agents: map[string]struct{}{}, renewed: now}
		b.m[cluster] = c
		first = true
	}
	if len(c.agents) < maxCauseAgents {
		c.agents[agentID] = struct{}{}
	}
	return first
}

// leave removes agentID from every cause; it returns the causes it ended.
func (b *causeBook) leave(agentID string) (ended []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, c := range b.m {
		if _, ok := c.agents[agentID]; ok {
			delete(c.agents, agentID)
			if len(c.agents) == 0 {
				delete(b.m, k)
				ended = append(ended, k)
			}
		}
	}
	return ended
}

// due returns the causes whose fleet note was last sent every or more
// before now, and marks them sent.
func (b *causeBook) due(now, every int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k, c := range b.m {
		if now-c.renewed >= every {
			c.renewed = now
			out = append(out, k)
		}
	}
	return out
}
