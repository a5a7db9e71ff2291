package admin

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// agentSet is a set of agents as Options.IntakeAgents and
// Options.ScoreAgents write it: exact IDs, and prefixes ending in "*".
type agentSet struct {
	all      bool
	exact    map[string]struct{}
	prefixes []string
}

func newAgentSet(list []string) agentSet {
	a := agentSet{exact: map[string]struct{}{}}
	for _, e := range list {
		switch p, wild := strings.CutSuffix(e, "*"); {
		case e == "*":
			a.all = true
		case wild:
			a.prefixes = append(a.prefixes, p)
		case e != "":
			a.exact[e] = struct{}{}
		}
	}
	return a
}

// empty reports whether the set allows no agent.
func (a *agentSet) empty() bool { return !a.all && len(a.exact) == 0 && len(a.prefixes) == 0 }

// has reports whether the set allows the agent id.
func (a *agentSet) has(id string) bool {
	if _, ok := a.exact[id]; ok || a.all {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// Why the intake refused a request, as /metrics counts them.
const (
	refusedInvalid    = iota // 400, 413: bad input
	refusedNotAllowed        // 403: an agent the token may not report for or score
	refusedRate              // 429: over Options.OutcomeRate
	refusedNewAgents         // 429: over Options.IntakeNewAgents
	nRefusals
)

// refusalNames are the reason label values of the refusals.
var refusalNames = [nRefusals]string{"invalid", "not_allowed", "outcome_rate", "new_agents"}

// intakeLimits are the intake's bounds on who reports for which agents
// and on the agents it creates, and its counters.
type intakeLimits struct {
	intakeAgents, scoreAgents agentSet
	newAgents                 [nRoles]*rateBound // by token, Options.IntakeNewAgents a minute
	perMinute                 int

	booked, created, scored atomic.Int64
	refused                 [nRefusals]atomic.Int64
}

// init sets the limits from o, and warns of a token that can do nothing.
func (l *intakeLimits) init(o *Options) {
	l.intakeAgents, l.scoreAgents = newAgentSet(o.IntakeAgents), newAgentSet(o.ScoreAgents)
	l.perMinute = o.IntakeNewAgents
	for i := range l.newAgents {
		l.newAgents[i] = newRateBound(float64(o.IntakeNewAgents)/60, o.IntakeNewAgents)
	}
	if o.IntakeToken != "" && l.intakeAgents.empty() {
		o.Logger.Warn("selfimprove admin: Options.IntakeToken is set without Options.IntakeAgents: the intake token may report for no agent")
	}
	if o.ScoreToken != "" && l.scoreAgents.empty() {
		o.Logger.Warn("selfimprove admin: Options.ScoreToken is set without Options.ScoreAgents: the score token may score no agent")
	}
	if o.IntakeToken != "" && (o.IntakeToken == o.Token || o.IntakeToken == o.ScoreToken) || o.ScoreToken != "" && o.ScoreToken == o.Token {
		o.Logger.Warn("selfimprove admin: two of Options.Token, IntakeToken and ScoreToken are the same: the token has the rights of the first")
	}
}

// allowed checks that a token of role who may act for agent id (named by
// field), else returns the 403 that says which option to set.
func (l *intakeLimits) allowed(who role, id, field string) error {
	set, name, what := &l.intakeAgents, "IntakeAgents", "the intake token may report for"
	switch who {
	case roleIntake:
	case roleScore:
		set, name, what = &l.scoreAgents, "ScoreAgents", "the score token may score"
	default:
		return nil
	}
	switch {
	case set.empty():
		return &badRequest{status: http.StatusForbidden, field: field,
			msg: fmt.Sprintf("%s no agent: set admin.Options.%s (exact IDs, or prefixes ending in \"*\")", what, name)}
	case !set.has(id):
		return &badRequest{status: http.StatusForbidden, field: field,
			msg: fmt.Sprintf("%s the agents of admin.Options.%s only, not %.64q", what, name, id)}
	}
	return nil
}

// tooMany answers 429 with Retry-After, naming field and the limit.
func tooMany(w http.ResponseWriter, wait time.Duration, field, limit string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeError(w, http.StatusTooManyRequests, field, fmt.Sprintf("over %s: retry in %v", limit, wait.Round(time.Millisecond)))
}

// rateBound is a token bucket: rate tokens a second, up to burst.
type rateBound struct {
	mu          sync.Mutex
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newRateBound(rate float64, burst int) *rateBound {
	return &rateBound{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take takes n tokens at now, or reports how long until there are n
// (forever, math.MaxInt64, when n is over the burst).
func (b *rateBound) take(n int, now time.Time) (time.Duration, bool) {
	return b.try(n, now, true)
}

// has reports whether n tokens are there at now, taking none, or how
// long until they are.
func (b *rateBound) has(n int, now time.Time) (time.Duration, bool) {
	return b.try(n, now, false)
}

func (b *rateBound) try(n int, now time.Time, take bool) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if need := float64(n) - b.tokens; need > 0 {
		if float64(n) > b.burst {
			return math.MaxInt64, false
		}
		return time.Duration(need / b.rate * float64(time.Second)), false
	}
	if take {
		b.tokens -= float64(n)
	}
	return 0, true
}
