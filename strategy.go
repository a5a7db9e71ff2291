package selfimprove

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// BuiltinStrategy is the loop's own Strategy, with no model and no
// network. It finds the dominant class of the window's failures (the class
// with the most failures among Analysis.Clusters; on a tie, the most
// recent) and proposes one safe tweak to a field the loop enforces:
//
//   - timeout: Timeout × 1.5, up to MaxTimeout;
//   - rate_limit: Backoff × 2 (from 1s when unset), or the longest wait
//     the window's rate-limit failures asked for in their text when longer
//     (see failure.TextWait), up to MaxBackoff, and MaxAttempts + 1, up to
//     MaxAttempts;
//   - overloaded, network, empty_response, bad_output (an answer fn
//     found bad; a new sample usually passes): MaxAttempts + 1, up to
//     MaxAttempts;
//   - first_token_timeout (a stream that stalled before its first token):
//     never Timeout; FirstTokenTimeout × 1.5 when the agent's measured
//     times to first token say the bound is too tight (see
//     MaxFirstTokenTimeout), else one more attempt, as for overloaded;
//   - model_unavailable: a proposal, when no live route is left (see
//     below).
//
// With a route ladder (Analysis.Routes), it first moves the route down
// the ladder to the next live route (not in Analysis.DeadRoutes) when the
// dominant class is model_unavailable or not_found, or when overloaded,
// timeout, first_token_timeout, network or empty_response failed 5 calls
// in a row (or the threshold's count, if higher); an upstream outage does
// not stop such a move.
//
// It consults the failure memory first (Analysis.Memories). A fix that was
// confirmed for a similar cluster of the dominant class (Confidence at
// least MinConfidence), on this agent or another, is preferred: its raised Timeout, MaxAttempts or
// Backoff are applied where they raise the agent's own (within the caps),
// and its Route, for a class that does not pass on its own, where the
// ladder lists it and it is not dead; the tweak's Reason names that
// fix by its cluster and change IDs. A move that repeats one rolled
// back or rejected for a similar cluster is avoided: it is filed for
// review instead.
//
// It never proposes a config still refused for the agent's dominant
// cluster (Analysis.Rejected), nor a move rolled back or rejected for a
// similar cluster within ForgetAfter. It proposes nothing during an
// upstream outage: when the dominant cluster is a shared cause of at
// least OutageAgents agents and the agent's latest failures came in a
// row, retries and timeouts cannot help, and a change made then would be
// judged (and rolled back) against the outage.
//
// Every cluster gets its answer: the dominant class, and each other class
// with at least 2 failures and a fifth of the window's. The tweak is the
// first safe move among them, by failures: the dominant class's, or the
// next class's when the dominant one's is used up (at its cap, rolled
// back before, no live route left, or a timeout with no Timeout set) or
// when it has none (auth, quota, bad_request, not_found, context_length,
// content_filter, tool_error, panic, canceled, other). Each class without
// a safe move gets a Proposal for human review (a Tweak with Review set),
// naming the tweaks rolled back for its cluster: with a suggested config
// beyond the cap where there is one, and always with a plain-text rule.
// Analyze returns the tweak, or else the dominant class's proposal; a
// Loop running the strategy itself also files the other classes'
// proposals (one open proposal per cluster), so that a permanent class
// and a transient one never wait for each other. A second safe move
// waits for the next analysis. Confidence is the class's share of the
// window's failures.
//
// With candidates (Analysis.Candidates, see Loop.SetCandidates), the
// dominant class's proposal, when it has no safe move left, gives way to
// the next candidate: the first that changes the config, runs on no dead
// route and repeats no tweak refused for the cluster (not for auth,
// panic and canceled failures). A fall of the mean score
// (Analysis.QualityDrop) is answered by the next candidate first, then by
// the ladder's next live route, then by a proposal (docs/quality.md).
//
// It weighs the agent's own clusters only: a cluster whose failures were
// passed on from a call nested in the agent's (Cluster.From) belongs to
// that call's agent, and is named in the evidence as left to it. With no
// cluster of its own, it proposes nothing.
//
// The zero value is ready to use: &BuiltinStrategy{} is what New uses
// without WithStrategy.
type BuiltinStrategy struct {
	// MaxTimeout caps the timeout it sets. Default 2 minutes; at most
	// Config.Timeout's bound, 24 hours.
	MaxTimeout time.Duration
	// MaxBackoff caps the backoff it sets. Default 30 seconds; at most
	// Config.Backoff's bound, 1 hour.
	MaxBackoff time.Duration
	// MaxAttempts caps the attempts per call it sets. Default 5; at most
	// Config.MaxAttempts's bound, 100.
	MaxAttempts int
	// MinConfidence is the Confidence a memory needs to be followed or
	// avoided. Default 0.5.
	MinConfidence float64
	// OutageAgents is how many agents a shared cause (Analysis.Shared)
	// must hit for the strategy to treat it as an upstream outage: when
	// the agent's dominant cluster is such a cause and its latest failures
	// came in a row (at least 2, or the threshold's count if lower), no
	// config of this agent can help, and the strategy proposes nothing;
	// the loop then looks again after a twelfth of the cooldown. Default 3.
	OutageAgents int
	// ForgetAfter is how long a fix rolled back or rejected for a similar
	// cluster (in the failure memory) is avoided: one rolled back during
	// an outage may well fix a later fault. Default 24 hours; negative:
	// for as long as the memory keeps it.
	ForgetAfter time.Duration
	// MaxFirstTokenTimeout caps the FirstTokenTimeout it sets (and so
	// does the config's Timeout, when set). It raises FirstTokenTimeout
	// only when at least 20 of the agent's calls measured their time to
	// first token (Analysis.FirstToken) and the 90th percentile of those
	// times is above half the bound: first tokens then come close to it
	// as a rule, and stalls are its tail cut off. Otherwise a stall is a
	// request the upstream left hanging, which a new request fixes: one
	// more attempt. Default 1 minute.
	MaxFirstTokenTimeout time.Duration
}

func (s *BuiltinStrategy) caps() (timeout, backoff time.Duration, attempts int) {
	timeout, backoff, attempts = s.MaxTimeout, s.MaxBackoff, s.MaxAttempts
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if backoff <= 0 {
		backoff = 30 * time.Second
	}
	if attempts <= 0 {
		attempts = 5
	}
	return min(timeout, maxTimeout), min(backoff, maxBackoff), min(attempts, maxAttemptsLimit)
}

// rules are the plain-text suggestions filed with proposals, by class.
var rules = map[failure.Class]string{
	failure.ClassAuth:             "Check the credentials the agent uses: the API key or token is missing, invalid, expired, or lacks a permission.",
	failure.ClassBadRequest:       "Fix the request the agent builds: it fails validation (schema, required fields, parameter values). Constrain the output format in the prompt, or validate before sending.",
	failure.ClassNotFound:         "The agent asks for something that does not exist: check the identifiers, paths or URLs it produces.",
	failure.ClassContextLength:    "Shorten the input: summarise or trim the history, retrieve fewer documents, or route to a model with a larger context window.",
	failure.ClassBadOutput:        "The model's answers fail your validation or parsing: another sample usually passes, so the loop retries them. If they persist, try another model (a route), lower the temperature, or state the output format (a JSON schema, structured outputs) in the prompt.",
	failure.ClassContentFilter:    "Review the prompts that trip the content filter, and rephrase the instructions so that the model's output stays within policy.",
	failure.ClassToolError:        "A tool the agent calls is failing: check the inputs the agent passes and the tool's own health.",
	failure.ClassPanic:            "The agent's code panics: fix the bug shown in the examples.",
	failure.ClassCanceled:         "Calls are cancelled by something other than their caller: check what cancels the agent's context.",
	failure.ClassTimeout:          "Calls time out beyond what the loop may raise: check the upstream's latency, or raise the cap.",
	failure.ClassRateLimit:        "Calls are rate limited beyond what backoff and retries absorb: raise the quota, spread the load, or cache.",
	failure.ClassOverloaded:       "The upstream is overloaded beyond what retries absorb: add a fallback route or reduce the load.",
	failure.ClassNetwork:          "Network failures persist beyond what retries absorb: check connectivity, DNS and the upstream's address.",
	failure.ClassEmptyResponse:    "The model keeps returning nothing: check the prompt, the stop sequences and the output token limit.",
	failure.ClassModelUnavailable: "The model the agent uses is unavailable and no fallback route is left: choose another model.",
	failure.ClassQuota:            "The provider account is out of credit or quota: add credit, raise the spending limit, or use another account.",

	// Streams (strategy_stream.go).
	failure.ClassFirstTokenTimeout: "Streams stall before their first token beyond what retries absorb: add a fallback route, or check the upstream's queueing.",
	failure.ClassStreamStalled:     "Streams go silent after they began beyond what retries absorb: add a fallback route, or check the upstream's connections.",
}

const otherRule = "Investigate the failures shown in the examples; no safe automatic fix is known for them."

// Analyze implements Strategy. Its answer is the one Loop applies or
// files; a Loop running the strategy itself also files the proposals for
// the window's other classes (see answers).
func (s *BuiltinStrategy) Analyze(_ context.Context, a Analysis) (*Tweak, error) {
	tw, _ := s.answers(a)
	return tw, nil
}

// answers answers each class of the window's failures that is the
// dominant one or passes the secondary bar (minSecondary): the first
// safe tweak among them, in rank order, is the answer (else the first
// proposal); every class without a safe move gets a proposal, returned
// in also. A second safe tweak waits for the next analysis: one change
// is verified at a time.
func (s *BuiltinStrategy) answers(a Analysis) (tw *Tweak, also []Tweak) {
	if a.QualityDrop.Scored > 0 {
		return qualityAnswer(&a), nil
	}
	var reviews []*Tweak
	for i, k := range rank(a.Clusters) {
		p := s.plan(&a, k)
		t := (*Tweak)(nil)
		if i == 0 {
			if t = p.move(); t == nil && s.outage(a, p.cl) {
				return nil, nil
			}
			if t == nil {
				t = s.learned(a, k.class, p.cur, p.cl.ID, p.rejected)
			}
		} else if k.n < minSecondary || 5*k.n < k.total {
			break
		}
		if t == nil {
			t = p.propose()
		}
		if i == 0 && t.Review {
			t = p.candidateOr(t)
		}
		switch {
		case t.Review:
			if tried := triedText(&a, t.Cluster); tried != "" {
				t.Reason = freeText(t.Reason + "; tried: " + tried)
			}
			reviews = append(reviews, t)
		case tw == nil:
			tw = t
		}
	}
	if tw == nil && len(reviews) > 0 {
		tw, reviews = reviews[0], reviews[1:]
	}
	for _, r := range reviews {
		also = append(also, *r)
	}
	return tw, also
}

// minSecondary is how many failures a class other than the dominant one
// needs, with a fifth of the window's at least, for the strategy to try
// its fix when the dominant class has no safe move left.
const minSecondary = 2

// plan starts the strategy's work on class k of the analysis a.
func (s *BuiltinStrategy) plan(a *Analysis, k ranked) *plan {
	p := &plan{s: s, a: a, class: k.class, cl: k.top, share: shareOf{k.n, k.total}, cur: a.Config, next: a.Config.clone(),
		evidence: fmt.Sprintf("%d of the window's %d failures are %s%s", k.n, k.total, k.class, nestedNote(a.Clusters))}
	p.maxTimeout, p.maxBackoff, p.maxAtt = s.caps()
	return p
}

// propose is the class's own move: a safe tweak, or a proposal.
func (p *plan) propose() *Tweak {
	switch p.class {
	case failure.ClassTimeout:
		return p.timeout()
	case failure.ClassRateLimit:
		return p.rateLimit()
	case failure.ClassOverloaded, failure.ClassNetwork, failure.ClassEmptyResponse, failure.ClassBadOutput, failure.ClassStreamStalled:
		return p.oneMoreAttempt()
	case failure.ClassFirstTokenTimeout:
		return p.firstToken()
	case failure.ClassModelUnavailable:
		return p.review(fmt.Sprintf("model unavailable on route %q and no live route left", p.cur.Route), nil)
	}
	return p.review(fmt.Sprintf("%s failures need a person: no safe automatic fix", p.class), nil)
}

// triedText names the tweaks rolled back for the cluster and still
// refused, newest last, with how each ended.
func triedText(a *Analysis, cluster string) string {
	var out []string
	for _, t := range a.Rejected {
		if t.Cluster == "" || t.Cluster == cluster {
			out = append(out, failure.Bound(t.Reason, 120)+" (rolled back)")
		}
	}
	if len(out) > 4 {
		out = out[len(out)-4:]
	}
	return strings.Join(out, "; ")
}

// plan is the built-in strategy's work on one analysis: the dominant
// class and cluster, the config in force and the one it builds.
type plan struct {
	s                      *BuiltinStrategy
	a                      *Analysis
	class                  failure.Class
	cl                     *Cluster
	share                  shareOf
	cur, next              Config
	evidence               string
	maxTimeout, maxBackoff time.Duration
	maxAtt                 int
}

// rejected reports whether c repeats a tweak rolled back or rejected for
// the cluster (not one refused to explorations only: Tweak.Explored).
func (p *plan) rejected(c Config) bool {
	return slices.ContainsFunc(p.a.Rejected, func(t Tweak) bool {
		return !t.Explored && (t.Cluster == "" || t.Cluster == p.cl.ID) && (t.Config.Equal(c) || repeats(p.cur, c, t.Config))
	})
}

// safe is the tweak to p.next, unless a similar agent rolled it back,
// which makes it a proposal.
func (p *plan) safe(reason string) *Tweak {
	if m, f := p.s.failedBefore(p.a.Memories, p.cur, p.next, p.a.Time); f != nil {
		return &Tweak{Config: p.cur, Review: true, Confidence: p.share.frac(), Cluster: p.cl.ID, Rule: rules[p.class],
			Reason: fmt.Sprintf("%s was rolled back for a similar failure on agent %q (similarity %.2f): %s", reason, f.AgentID, m.Similarity, p.evidence)}
	}
	return &Tweak{Config: p.next, Reason: reason + " (" + p.evidence + ")", Confidence: p.share.frac(), Cluster: p.cl.ID}
}

// review is a proposal for a person, suggesting suggest when it was not
// rolled back before.
func (p *plan) review(why string, suggest *Config) *Tweak {
	t := &Tweak{Config: p.cur, Review: true, Confidence: p.share.frac(), Cluster: p.cl.ID,
		Reason: why + " (" + p.evidence + ")"}
	if suggest != nil && !p.rejected(*suggest) && suggest.validate() == nil {
		t.Config = *suggest // beyond the loop's bounds, the rule alone
	}
	t.Rule = rules[p.class]
	if t.Rule == "" {
		t.Rule = otherRule
	}
	return t
}

// timeout raises the timeout by half, up to its cap.
func (p *plan) timeout() *Tweak {
	cur := p.cur
	if cur.Timeout <= 0 {
		return p.review("timeouts with no timeout set: the deadline comes from elsewhere", nil)
	}
	p.next.Timeout = min(cur.Timeout*3/2, p.maxTimeout)
	beyond := cur.clone()
	beyond.Timeout = cur.Timeout * 3 / 2
	switch {
	case p.next.Timeout <= cur.Timeout:
		return p.review(fmt.Sprintf("timeout %v is at its cap %v", cur.Timeout, p.maxTimeout), &beyond)
	case p.rejected(p.next):
		return p.review(fmt.Sprintf("raising the timeout to %v was rolled back before", p.next.Timeout), nil)
	}
	return p.safe(fmt.Sprintf("timeouts: raise the timeout from %v to %v", cur.Timeout, p.next.Timeout))
}

// rateLimit doubles the backoff (at least to the wait the failures asked
// for) and allows one more attempt, up to their caps.
func (p *plan) rateLimit() *Tweak {
	cur, next := p.cur, &p.next
	b := cur.Backoff * 2
	if cur.Backoff <= 0 {
		b = time.Second
	}
	b = max(b, rateLimitWait(p.a.Failures))
	next.Backoff = min(b, p.maxBackoff)
	next.MaxAttempts = min(p.attempts()+1, p.maxAtt)
	if next.Backoff < cur.Backoff {
		next.Backoff = cur.Backoff
	}
	if next.MaxAttempts < p.attempts() {
		next.MaxAttempts = cur.MaxAttempts
	}
	switch {
	case next.Equal(cur):
		beyond := cur.clone()
		beyond.Backoff, beyond.MaxAttempts = b, p.attempts()+1
		return p.review(fmt.Sprintf("backoff %v and %d attempts are at their caps", cur.Backoff, p.attempts()), &beyond)
	case p.rejected(*next):
		return p.review("raising the backoff and retries was rolled back before", nil)
	}
	return p.safe(fmt.Sprintf("rate limited: backoff %v → %v, attempts %d → %d", cur.Backoff, next.Backoff, p.attempts(), next.attempts()))
}

// attempts is how many attempts the calls of the plan's class make now:
// the config's, or the transient floor when it applies and is higher.
func (p *plan) attempts() int {
	n := p.cur.attempts()
	if floored(p.class) {
		n = max(n, p.a.TransientAttempts)
	}
	return n
}

// oneMoreAttempt allows one more attempt, up to the cap.
func (p *plan) oneMoreAttempt() *Tweak {
	cur := p.cur
	p.next.MaxAttempts = min(p.attempts()+1, p.maxAtt)
	switch {
	case p.next.MaxAttempts <= p.attempts():
		beyond := cur.clone()
		beyond.MaxAttempts = p.attempts() + 1
		return p.review(fmt.Sprintf("%d attempts is at its cap", p.attempts()), &beyond)
	case p.rejected(p.next):
		return p.review("one more attempt was rolled back before", nil)
	}
	return p.safe(fmt.Sprintf("%s: attempts %d → %d", p.class, p.attempts(), p.next.attempts()))
}

// moveRun is how many calls in a row, at the least (the threshold's
// count when higher), must fail, each after its retries, for a transient
// cause to move the route: a route that fails now and then is kept, one
// that stopped answering is left.
const moveRun = 5

// move moves the route to the next live route of the ladder (see Routes)
// when the current one keeps failing for a cause another route can fix:
// no such model, or overload, 5xx, timeouts and network failures that
// failed moveRun calls in a row (or the threshold's count). It returns
// nil when no move applies.
func (p *plan) move() *Tweak {
	a := p.a
	if a.Routes.empty() {
		return nil
	}
	cur := a.Routes.name(p.cur.Route)
	why := fmt.Sprintf("%s on route %q", p.class, cur) // plain words: "move to route …: " + why
	switch p.class {
	case failure.ClassModelUnavailable:
	case failure.ClassNotFound:
	case failure.ClassOverloaded, failure.ClassTimeout, failure.ClassFirstTokenTimeout, failure.ClassStreamStalled, failure.ClassNetwork, failure.ClassEmptyResponse:
		run, ok := runClass(a, p.class)
		if a.Stats.ConsecutiveFailures < max(moveRun, a.Threshold.Failures) || !ok {
			return nil
		}
		// The rates the move is made on, as counted.
		why = fmt.Sprintf("the last %d calls on route %q failed (%s), each after its attempts; %d of the window's %d calls failed",
			a.Stats.ConsecutiveFailures, cur, run, a.Stats.Failures, a.Stats.Calls)
	default:
		return nil
	}
	ladder := a.Routes.ladder()
	for _, r := range ladder[slices.Index(ladder, cur)+1:] {
		if a.dead(r) {
			continue
		}
		p.next = p.cur.clone()
		p.next.Route = r
		if p.rejected(p.next) {
			continue
		}
		return p.safe(fmt.Sprintf("move to route %q: %s", r, why))
	}
	return nil
}

// runClass returns the class of the run of failures a ends with (its
// last Stats.ConsecutiveFailures failures), the one most of them have
// (class on a tie), and whether each has a class another route can fix:
// a run of bad requests after scattered overloads moves no route. With
// no failures listed it trusts class.
func runClass(a *Analysis, class failure.Class) (failure.Class, bool) {
	run := a.Failures[max(len(a.Failures)-a.Stats.ConsecutiveFailures, 0):]
	if len(run) == 0 {
		return class, true
	}
	count := map[failure.Class]int{}
	for _, f := range run {
		switch f.Class {
		case failure.ClassOverloaded, failure.ClassTimeout, failure.ClassFirstTokenTimeout, failure.ClassStreamStalled, failure.ClassNetwork, failure.ClassEmptyResponse:
			count[f.Class]++
		default:
			return f.Class, false
		}
	}
	best := class
	for c, n := range count {
		if n > count[best] || n == count[best] && best != class && c < best {
			best = c
		}
	}
	return best, true
}

// outage reports whether the agent's dominant cluster cl is an upstream
// outage: a shared cause of at least OutageAgents agents (by cluster, or
// by class when the cause is a class), with the agent's latest failures
// in a row.
func (s *BuiltinStrategy) outage(a Analysis, cl *Cluster) bool {
	n := s.OutageAgents
	if n <= 0 {
		n = defaultOutageAgents
	}
	return sharedOutage(&a, cl, n)
}

// outageRun is the most consecutive failures an outage needs: the
// threshold's count, if lower.
const outageRun = 2

// defaultOutageAgents is BuiltinStrategy.OutageAgents's default, and the
// count by which the loop recognises an outage when a strategy proposes
// nothing.
const defaultOutageAgents = 3

// sharedOutage reports whether cluster cl of the analysis a is an
// upstream outage: a shared cause of at least agents agents (by cluster,
// or by class when the cause is a class), with the agent's latest
// failures in a row (at least the threshold's count, or 2 if lower).
func sharedOutage(a *Analysis, cl *Cluster, agents int) bool {
	if cl == nil || a.Stats.ConsecutiveFailures < min(max(a.Threshold.Failures, 1), outageRun) {
		return false
	}
	for _, sc := range a.Shared {
		if len(sc.Agents) >= agents && (sc.ClusterID == cl.ID || sc.ClusterID == "" && sc.Class == cl.Class) {
			return true
		}
	}
	return false
}

type shareOf struct{ n, total int }

func (s shareOf) frac() float64 {
	if s.total == 0 {
		return 0
	}
	return float64(s.n) / float64(s.total)
}

// ranked is one class of an analysis's failures: its failures, the
// window's, and its largest cluster.
type ranked struct {
	class    failure.Class
	n, total int
	last     time.Time
	top      *Cluster
}

// rank returns the classes of the agent's own clusters (not passed on
// from a nested call: see Cluster.From), most failures first (on a tie,
// the one seen last first).
func rank(cs []Cluster) []ranked {
	var out []ranked
	total := 0
	for i := range cs {
		c := &cs[i]
		if c.From != "" {
			continue
		}
		total += c.Count
		j := slices.IndexFunc(out, func(k ranked) bool { return k.class == c.Class })
		if j < 0 {
			out = append(out, ranked{class: c.Class})
			j = len(out) - 1
		}
		k := &out[j]
		k.n += c.Count
		if c.LastSeen.After(k.last) {
			k.last = c.LastSeen
		}
		if k.top == nil || c.Count > k.top.Count {
			k.top = c
		}
	}
	for i := range out {
		out[i].total = total
	}
	slices.SortStableFunc(out, func(a, b ranked) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return b.last.Compare(a.last)
	})
	return out
}

// dominant returns the class with the most failures in the agent's own
// clusters (on a tie, the one seen last), its largest cluster, and its
// share.
func dominant(cs []Cluster) (failure.Class, *Cluster, shareOf) {
	r := rank(cs)
	if len(r) == 0 {
		return "", nil, shareOf{}
	}
	return r[0].class, r[0].top, shareOf{r[0].n, r[0].total}
}

// rateLimitWait returns the longest wait the rate-limit failures among fs
// asked for in their text (failure.TextWait: the provider's "Please try
// again in 20s", or the "retry after 2s" of an adapter's error, which
// carries the Retry-After and rate-limit reset headers), or 0. The
// built-in strategy raises a rate-limited agent's Backoff to it.
func rateLimitWait(fs []Failure) time.Duration {
	var d time.Duration
	for i := range fs {
		if fs[i].Class == failure.ClassRateLimit {
			d = max(d, failure.TextWait(fs[i].Err))
		}
	}
	return d
}

// candidateOr is the dominant class's answer when its own is t, a
// proposal for a person (no safe move left): the next candidate, unless
// the class is one no config of the agent's fixes.
func (p *plan) candidateOr(t *Tweak) *Tweak {
	switch p.class {
	case failure.ClassCanceled, failure.ClassPanic, failure.ClassAuth:
		return t
	}
	next, name, ok := p.a.nextCandidate(p.cl.ID, false)
	if !ok {
		return t
	}
	return &Tweak{Config: next, Confidence: p.share.frac(), Cluster: p.cl.ID,
		Reason: fmt.Sprintf("no safe move left for %s: candidate %q (%s)", p.class, name, p.evidence)}
}
