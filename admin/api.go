package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// Bounds on a page.
const (
	defaultPage = 100
	maxPage     = 1000
)

// fail answers with the error of an input check or of the loop.
func (s *server) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	switch {
	case errors.As(err, &br):
		writeError(w, br.status, br.field, br.msg)
	case errors.Is(err, selfimprove.ErrProposalNotFound):
		writeError(w, http.StatusNotFound, "id", "no such proposal")
	case errors.Is(err, selfimprove.ErrUnknownVersion):
		writeError(w, http.StatusBadRequest, "version", "the agent's history has no such version")
	case errors.Is(err, selfimprove.ErrInvalidConfig):
		// The loop names the field "config.timeout": so does the body.
		writeError(w, http.StatusBadRequest, namedField(err, "config.", "config."), strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrInvalidThreshold):
		// The loop names it "threshold.window"; the body, "window".
		writeError(w, http.StatusBadRequest, namedField(err, "threshold.", ""), strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrInvalidScore):
		writeError(w, http.StatusBadRequest, "score", strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrUnknownCall):
		writeError(w, http.StatusNotFound, "call_id", strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrScoreTooLate):
		writeError(w, http.StatusGone, "call_id", strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrInvalidAgentID):
		writeError(w, http.StatusBadRequest, "agent", strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrTweakRejected), errors.Is(err, selfimprove.ErrVerifying), errors.Is(err, selfimprove.ErrProposalState):
		writeError(w, http.StatusConflict, "", strings.TrimPrefix(err.Error(), "selfimprove: "))
	case errors.Is(err, selfimprove.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "", "the loop is closed")
	case errors.Is(err, selfimprove.ErrReadOnly):
		// A Loop on a ReadOnlyStore: as selfimprove serve --read-only
		// answers a mutation.
		writeError(w, http.StatusForbidden, "", "read-only: the loop reads a state directory another process owns; mutations are disabled")
	default:
		s.o.Logger.Error("selfimprove admin: the loop failed", "error", err)
		writeError(w, http.StatusInternalServerError, "", "the loop could not do it; see its log")
	}
}

// namedField is the body field the loop's error err names as
// prefix+"name" (a word of lower-case letters and underscores): as
// body+"name"; without one, prefix without its dot.
func namedField(err error, prefix, body string) string {
	msg := err.Error()
	i := strings.Index(msg, prefix)
	if i < 0 {
		return strings.TrimSuffix(prefix, ".")
	}
	name := msg[i+len(prefix):]
	n := 0
	for n < len(name) && (name[n] >= 'a' && name[n] <= 'z' || name[n] == '_') {
		n++
	}
	if n == 0 {
		return strings.TrimSuffix(prefix, ".")
	}
	return body + name[:n]
}

// agentCalls is agentOf with the agent's window's buckets
// (Loop.ViewCalls).
func (s *server) agentCalls(w http.ResponseWriter, r *http.Request) (selfimprove.AgentView, []selfimprove.CallBucket, bool) {
	id := r.PathValue("agent")
	if len(id) > selfimprove.MaxAgentIDLen {
		writeError(w, http.StatusBadRequest, "agent", "the agent ID is over "+strconv.Itoa(selfimprove.MaxAgentIDLen)+" bytes")
		return selfimprove.AgentView{}, nil, false
	}
	o, calls, ok := s.l.ViewCalls(id, nil)
	if !ok {
		writeError(w, http.StatusNotFound, "agent", "no such agent")
	}
	return o, calls, ok
}

// agentOf returns the agent named by the request's {agent} segment, or
// answers 404 (or 400 for an ID over the limit).
func (s *server) agentOf(w http.ResponseWriter, r *http.Request) (selfimprove.AgentView, bool) {
	id := r.PathValue("agent")
	if len(id) > selfimprove.MaxAgentIDLen {
		writeError(w, http.StatusBadRequest, "agent", "the agent ID is over "+strconv.Itoa(selfimprove.MaxAgentIDLen)+" bytes")
		return selfimprove.AgentView{}, false
	}
	o, ok := s.l.View(id)
	if !ok {
		writeError(w, http.StatusNotFound, "agent", "no such agent")
	}
	return o, ok
}

// limit reads the limit query parameter.
func limit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return defaultPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPage {
		return 0, bad("limit", "limit must be a number in 1..%d", maxPage)
	}
	return n, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, bad(name, "%s must be true or false", name)
	}
	return b, nil
}

// listAgents serves GET /api/agents.
func (s *server) listAgents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := limit(q)
	if err != nil {
		s.fail(w, err)
		return
	}
	unhealthy, err := boolParam(q, "unhealthy")
	if err != nil {
		s.fail(w, err)
		return
	}
	prefix := q.Get("prefix")
	after, err := url.PathUnescape(q.Get("after"))
	if err != nil {
		s.fail(w, bad("after", "after must be the next value of the previous page"))
		return
	}
	// The page from the loop's index of IDs, in order: from the first ID
	// after after (after+"\x00") or with the prefix, whichever is later.
	from := max(prefix, after+"\x00")
	if q.Get("after") == "" {
		from = prefix
	}
	out := AgentList{Now: s.o.Now().UTC(), Agents: []AgentSummary{}}
	last := "" // the ID of the last agent on the page
	buf := make([]selfimprove.CallBucket, 0, 64)
	for batch := n + 1; ; batch = min(4*batch, 4*maxPage) {
		ids := s.l.AgentsFrom(from, batch)
		for _, id := range ids {
			if !strings.HasPrefix(id, prefix) {
				writeJSON(w, http.StatusOK, out) // past the prefix
				return
			}
			if len(out.Agents) == n {
				out.Next = Ref(last) // the real ID: a summary's ID is readable, its bad bytes U+FFFD
				writeJSON(w, http.StatusOK, out)
				return
			}
			if o, calls, ok := s.l.ViewCalls(id, buf[:0]); ok { // else gone meanwhile
				buf = calls
				if v := s.summary(&o, calls); !unhealthy || !v.Healthy {
					out.Agents, last = append(out.Agents, v), id
				}
			}
		}
		if len(ids) < batch {
			writeJSON(w, http.StatusOK, out)
			return
		}
		from = ids[len(ids)-1] + "\x00"
	}
}

// getAgent serves GET /api/agents/{agent}.
func (s *server) getAgent(w http.ResponseWriter, r *http.Request) {
	o, calls, ok := s.agentCalls(w, r)
	if !ok {
		return
	}
	id := o.AgentID
	changes := s.l.Changes(id)
	d := AgentDetail{
		AgentSummary: s.summary(&o, calls),
		Now:          s.o.Now().UTC(),
		Config:       o.Config,
		Versions: versions(s.l.History(id), changes,
			s.l.Events(selfimprove.EventFilter{AgentIDs: []string{id}, Types: []selfimprove.EventType{selfimprove.EventConfigSet}, Limit: 1 << 20})),
		Changes:   nonNil(changes),
		Clusters:  nonNil(s.l.Clusters(id)),
		Proposals: nonNil(s.l.Proposals(func(p selfimprove.Proposal) bool { return p.AgentID == id })),
		Home:      o.Home, Held: o.Held, DeadRoutes: nonNil(o.DeadRoutes),
		FirstToken: firstToken(o.FirstToken),
		Routes:     routeQuality(o.Routes),
	}
	for i := range d.Versions {
		if q, ok := o.Versions[d.Versions[i].Version]; ok {
			d.Versions[i].Quality = qualityOf(q)
		}
	}
	writeJSON(w, http.StatusOK, d)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// done answers a mutation with the agent as it stands now.
func (s *server) done(w http.ResponseWriter, id string, res Result) {
	if o, calls, ok := s.l.ViewCalls(id, nil); ok {
		v := s.summary(&o, calls)
		res.Agent = &v
	}
	writeJSON(w, http.StatusOK, res)
}

// changeAgent serves a POST that changes one agent: it decodes the body into
// a T, finds the agent (404 when the loop does not know it), and runs
// apply; an error goes to fail, else the answer is the agent's state with
// apply's Result.
func changeAgent[T any](s *server, w http.ResponseWriter, r *http.Request, apply func(o selfimprove.AgentView, req *T) (Result, error)) {
	var req T
	raw, err := decode(r.Body, &req, false)
	if err != nil {
		s.fail(w, err)
		return
	}
	o, ok := s.agentOf(w, r)
	if !ok {
		return
	}
	res, err := apply(o, &req)
	if err != nil {
		s.fail(w, nullNamed(raw, err))
		return
	}
	s.done(w, o.AgentID, res)
}

// rewind serves POST /api/agents/{agent}/rewind.
func (s *server) rewind(w http.ResponseWriter, r *http.Request) {
	changeAgent(s, w, r, func(o selfimprove.AgentView, req *RewindRequest) (Result, error) {
		if err := checkRewind(req); err != nil {
			return Result{}, err
		}
		reason := req.Reason
		if req.Author != "" {
			reason += " (by " + req.Author + ")"
		}
		if req.Verify != nil && !*req.Verify {
			var cfg *selfimprove.Config
			for _, c := range s.l.History(o.AgentID) {
				if c.Version == req.Version {
					cfg = &c
				}
			}
			switch {
			case cfg == nil:
				return Result{}, selfimprove.ErrUnknownVersion
			case req.Version == o.Config.Version:
				return Result{}, &badRequest{status: http.StatusConflict, field: "version", msg: "version " + strconv.Itoa(req.Version) + " is the current config"}
			}
			cfg.Version = 0 // the next version
			return Result{}, s.l.SetConfig(o.AgentID, *cfg)
		}
		ch, err := s.l.Rewind(o.AgentID, req.Version, reason)
		return Result{Change: &ch}, err
	})
}

// checkRewind checks a RewindRequest's values.
func checkRewind(req *RewindRequest) error {
	if req.Version < 1 {
		return bad("version", "version must be a config version, 1 or more")
	}
	if err := text("reason", req.Reason, maxReason, true); err != nil {
		return err
	}
	return text("author", req.Author, 128, false)
}

// setConfig serves POST /api/agents/{agent}/config.
func (s *server) setConfig(w http.ResponseWriter, r *http.Request) {
	changeAgent(s, w, r, func(o selfimprove.AgentView, req *ConfigRequest) (Result, error) {
		if err := req.Config.required(); err != nil {
			return Result{}, err
		}
		cfg, err := req.Config.config()
		if err != nil {
			return Result{}, err
		}
		return Result{}, s.l.SetConfig(o.AgentID, cfg)
	})
}

// config checks b and returns its Config.
func (b *ConfigBody) config() (selfimprove.Config, error) {
	var c selfimprove.Config
	var err error
	if c.Timeout, err = duration("config.timeout", b.Timeout); err != nil {
		return c, err
	}
	if c.Backoff, err = duration("config.backoff", b.Backoff); err != nil {
		return c, err
	}
	if c.FirstTokenTimeout, err = duration("config.first_token_timeout", b.FirstTokenTimeout); err != nil {
		return c, err
	}
	if b.MaxAttempts < 0 || b.MaxAttempts > 100 {
		return c, bad("config.max_attempts", "config.max_attempts must be in 0..100")
	}
	if err := text("config.route", b.Route, 1024, false); err != nil {
		return c, err
	}
	if len(b.Params) > 64 {
		return c, bad("config.params", "config.params has more than 64 entries")
	}
	for k, v := range b.Params {
		if err := text("config.params", k+v, 4096, false); err != nil {
			return c, err
		}
	}
	c.MaxAttempts, c.Route, c.Params = b.MaxAttempts, b.Route, b.Params
	return c, nil
}

// setThreshold serves POST /api/agents/{agent}/threshold.
func (s *server) setThreshold(w http.ResponseWriter, r *http.Request) {
	changeAgent(s, w, r, func(o selfimprove.AgentView, req *ThresholdRequest) (Result, error) {
		t, err := req.threshold()
		if err != nil {
			return Result{}, err
		}
		return Result{}, s.l.SetThreshold(o.AgentID, t)
	})
}

// threshold checks req and returns its Threshold (zero for Clear).
func (req *ThresholdRequest) threshold() (selfimprove.Threshold, error) {
	var t selfimprove.Threshold
	if req.Clear {
		if req.Failures != 0 || req.Window != "" || req.Cooldown != "" {
			return t, bad("clear", "clear removes the manual threshold: give no other field")
		}
		return t, nil
	}
	if req.Failures < 1 || req.Failures > selfimprove.MaxThresholdFailures {
		return t, bad("failures", "failures must be in 1..%d", selfimprove.MaxThresholdFailures)
	}
	var err error
	if t.Window, err = duration("window", req.Window); err != nil {
		return t, err
	}
	if t.Window == 0 {
		return t, bad("window", "window is required and must be positive")
	}
	if t.Cooldown, err = duration("cooldown", req.Cooldown); err != nil {
		return t, err
	}
	t.Failures = req.Failures
	return t, nil
}

// markCritical serves POST /api/agents/{agent}/critical.
func (s *server) markCritical(w http.ResponseWriter, r *http.Request) {
	changeAgent(s, w, r, func(o selfimprove.AgentView, req *CriticalRequest) (Result, error) {
		if req.Critical == nil {
			return Result{}, bad("critical", "critical is required: true or false")
		}
		return Result{}, s.l.MarkCritical(o.AgentID, *req.Critical)
	})
}

// eventFilter reads an EventFilter from the query (agent, type, since,
// until, after, before, limit).
func eventFilter(q url.Values) (selfimprove.EventFilter, error) {
	var f selfimprove.EventFilter
	if a, ok := q["agent"]; ok {
		f.AgentIDs = a
	}
	for _, t := range q["type"] {
		if t == "" || len(t) > 64 {
			return f, bad("type", "type must name an event type")
		}
		f.Types = append(f.Types, selfimprove.EventType(t))
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, bad(p.name, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", p.name)
			}
			*p.t = t
		}
	}
	f.After, f.Before = q.Get("after"), q.Get("before")
	n, err := limit(q)
	f.Limit = n
	return f, err
}

// listEvents serves GET /api/events.
func (s *server) listEvents(w http.ResponseWriter, r *http.Request) {
	f, err := eventFilter(r.URL.Query())
	if err != nil {
		s.fail(w, err)
		return
	}
	evs := s.l.Events(f)
	out := EventList{Events: make([]EventView, len(evs))}
	for i, e := range evs {
		out.Events[i] = EventView{Event: e, AgentRef: Ref(e.AgentID)}
	}
	writeJSON(w, http.StatusOK, out)
}

// similar serves GET /api/similar.
func (s *server) similar(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	text := q.Get("q")
	if strings.TrimSpace(text) == "" {
		s.fail(w, bad("q", "q is required: the text of a failure"))
		return
	}
	if len(text) > 4096 {
		s.fail(w, bad("q", "q is over 4096 bytes"))
		return
	}
	k := 5
	if v := q.Get("k"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			s.fail(w, bad("k", "k must be a number in 1..100"))
			return
		}
		k = n
	}
	writeJSON(w, http.StatusOK, SimilarList{Memories: nonNil(s.l.Similar(text, k))})
}
