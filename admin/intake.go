package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// Bounds of the outcome intake.
const (
	maxOutcomeError    = 4096            // bytes of an outcome's error text
	maxOutcomeCode     = 128             // bytes of its error code
	maxOutcomeDurMS    = 24 * 3600 * 1e3 // its duration, in milliseconds
	maxOutcomeAttempts = 100             // its attempts
	maxOutcomeCost     = 1e12            // its cost
)

// OutcomeBatch is the body of POST /api/outcomes: calls that agents
// outside Go made, for the loop to book as if it had run them (see
// selfimprove.Loop.Record and docs/intake.md).
type OutcomeBatch struct {
	// Outcomes are the calls, booked in order: 1 to Options.MaxOutcomes
	// of them. Required.
	Outcomes []Outcome `json:"outcomes"`
}

// Outcome is one call an agent made outside the loop.
type Outcome struct {
	// Agent is the agent's ID, 1 to 1,024 bytes. Required.
	Agent string `json:"agent"`
	// Success says whether the call finally succeeded. Required.
	Success *bool `json:"success"`
	// Error is the failure's text (at most 4 KiB; the loop scrubs secrets
	// from it and keeps its first 200 bytes), classified like a Go
	// error's text. Optional; only with success false.
	Error string `json:"error,omitempty"`
	// Status is the provider's HTTP status of a failure (100..599),
	// classified as for a Go SDK's error (429 rate_limit, 5xx
	// overloaded, …). Optional; only with success false.
	Status int `json:"status,omitempty"`
	// Code is the provider's error code ("rate_limit_exceeded",
	// "model_not_found"), at most 128 bytes. Optional; only with success
	// false.
	Code string `json:"code,omitempty"`
	// DurationMS is the call's duration in milliseconds, every attempt
	// and wait included: 0 to 86,400,000. Required.
	DurationMS *float64 `json:"duration_ms"`
	// Attempts is how many attempts the call made, 0 to 100 (0: one).
	// Optional.
	Attempts int `json:"attempts,omitempty"`
	// ConfigVersion is the version of the config the call ran under, as
	// GET /api/agents/{agent}/config served it. Required, 1 or more, and
	// a version the agent has had.
	ConfigVersion int `json:"config_version"`
	// Canceled says the caller gave up on the call (a user stopped it):
	// it is counted as ignored, not as a failure. Optional; only with
	// success false.
	Canceled bool `json:"canceled,omitempty"`
	// Quality is the answer's quality score in [0, 1], booked as
	// Loop.Score books a score by call ID: credited to the version the
	// call ran under and judged like any (docs/quality.md). Cost is its
	// cost (at least 0, in the caller's unit), booked as AddCost's. Both
	// optional.
	Quality *float64 `json:"quality,omitempty"`
	Cost    *float64 `json:"cost,omitempty"`
}

// OutcomeResult answers POST /api/outcomes.
type OutcomeResult struct {
	// Booked counts the outcomes booked: all of them.
	Booked int `json:"booked"`
	// Agents are the batch's agents, by first appearance, each with the
	// config version in force once the batch was booked: a client whose
	// config has another version reads it again.
	Agents []AgentVersion `json:"agents"`
}

// AgentVersion is an agent with the version of its config in force.
type AgentVersion struct {
	ID            string `json:"id"`
	Ref           string `json:"ref"`
	ConfigVersion int    `json:"config_version"`
}

// AgentConfig answers GET /api/agents/{agent}/config: the config in
// force for the agent, the default config for an agent the loop does not
// know yet. Its ETag changes exactly when the config does.
type AgentConfig struct {
	ID     string             `json:"id"`
	Ref    string             `json:"ref"`
	Config selfimprove.Config `json:"config"`
}

// reportedError is the failure of an outcome, for the loop to classify:
// its status through StatusCode, its code and text through its text.
type reportedError struct {
	status     int
	code, text string
}

func (e *reportedError) Error() string {
	var b strings.Builder
	if e.status != 0 {
		b.WriteString("status " + strconv.Itoa(e.status))
	}
	if e.code != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.code)
	}
	if e.text != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.text)
	}
	if b.Len() == 0 {
		return "the call failed (no error text reported)"
	}
	return b.String()
}

// StatusCode returns the provider's status, 0 when none was reported.
func (e *reportedError) StatusCode() int { return e.status }

// check checks o, the i-th outcome of a batch, and returns the Report it
// books. maxVersion returns the highest version an agent has had.
func (o *Outcome) check(i int, maxVersion func(id string) int) (selfimprove.Report, error) {
	var r selfimprove.Report
	f := func(name string) string { return "outcomes[" + strconv.Itoa(i) + "]." + name }
	switch {
	case o.Agent == "":
		return r, bad(f("agent"), "%s is required", f("agent"))
	case len(o.Agent) > selfimprove.MaxAgentIDLen:
		return r, bad(f("agent"), "%s is over %d bytes", f("agent"), selfimprove.MaxAgentIDLen)
	case o.Success == nil:
		return r, bad(f("success"), "%s is required: true or false", f("success"))
	case o.DurationMS == nil:
		return r, bad(f("duration_ms"), "%s is required", f("duration_ms"))
	case !(*o.DurationMS >= 0 && *o.DurationMS <= maxOutcomeDurMS):
		return r, bad(f("duration_ms"), "%s must be in 0..%.0f", f("duration_ms"), maxOutcomeDurMS)
	case o.Attempts < 0 || o.Attempts > maxOutcomeAttempts:
		return r, bad(f("attempts"), "%s must be in 0..%d", f("attempts"), maxOutcomeAttempts)
	case o.Status != 0 && (o.Status < 100 || o.Status > 599):
		return r, bad(f("status"), "%s must be an HTTP status, 100..599", f("status"))
	case o.Quality != nil && !(*o.Quality >= 0 && *o.Quality <= 1):
		return r, bad(f("quality"), "%s must be in [0, 1]", f("quality"))
	case o.Cost != nil && !(*o.Cost >= 0 && *o.Cost <= maxOutcomeCost):
		return r, bad(f("cost"), "%s must be in 0..%g", f("cost"), float64(maxOutcomeCost))
	case o.ConfigVersion < 1:
		return r, bad(f("config_version"), "%s is required: the version of the config the call ran under", f("config_version"))
	case o.ConfigVersion > maxVersion(o.Agent):
		return r, bad(f("config_version"), "%s: the agent never had version %d", f("config_version"), o.ConfigVersion)
	}
	if err := text(f("error"), o.Error, maxOutcomeError, false); err != nil {
		return r, err
	}
	if err := text(f("code"), o.Code, maxOutcomeCode, false); err != nil {
		return r, err
	}
	if *o.Success {
		for _, x := range []struct {
			name string
			set  bool
		}{{"error", o.Error != ""}, {"status", o.Status != 0}, {"code", o.Code != ""}, {"canceled", o.Canceled}} {
			if x.set {
				return r, bad(f(x.name), "%s is for a failed call only (success is true)", f(x.name))
			}
		}
	} else {
		r.Err = &reportedError{status: o.Status, code: o.Code, text: o.Error}
	}
	r.Duration = time.Duration(*o.DurationMS * float64(time.Millisecond))
	r.Attempts, r.ConfigVersion, r.Ignored = o.Attempts, o.ConfigVersion, o.Canceled
	if o.Cost != nil {
		r.Cost = *o.Cost
	}
	return r, nil
}

// maxVersion returns the highest config version the loop holds for id:
// the default config's for an agent it does not know.
func (s *server) maxVersion(id string) int {
	v := s.l.Config(id).Version
	for _, c := range s.l.History(id) {
		v = max(v, c.Version)
	}
	return v
}

// outcomes serves POST /api/outcomes: it checks the whole batch, takes
// its outcomes from the rate bound, and books them in order.
func (s *server) outcomes(w http.ResponseWriter, r *http.Request) {
	var b OutcomeBatch
	if err := decode(r.Body, &b, false); err != nil {
		s.fail(w, err)
		return
	}
	if len(b.Outcomes) == 0 || len(b.Outcomes) > s.o.MaxOutcomes {
		s.fail(w, bad("outcomes", "outcomes must hold 1..%d outcomes", s.o.MaxOutcomes))
		return
	}
	versions := map[string]int{}
	maxVersion := func(id string) int {
		v, ok := versions[id]
		if !ok {
			v = s.maxVersion(id)
			versions[id] = v
		}
		return v
	}
	reps := make([]selfimprove.Report, len(b.Outcomes))
	for i := range b.Outcomes {
		var err error
		if reps[i], err = b.Outcomes[i].check(i, maxVersion); err != nil {
			s.fail(w, err)
			return
		}
	}
	if wait, ok := s.rate.take(len(reps), s.o.Now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		writeError(w, http.StatusTooManyRequests, "outcomes",
			fmt.Sprintf("over %g outcomes a second: retry in %v", s.o.OutcomeRate, wait.Round(time.Millisecond)))
		return
	}
	out := OutcomeResult{Agents: []AgentVersion{}}
	seen := map[string]int{}
	for i := range reps {
		id := b.Outcomes[i].Agent
		rep, err := s.l.Record(r.Context(), id, reps[i])
		if err != nil {
			if errors.Is(err, selfimprove.ErrUnknownVersion) {
				err = &badRequest{status: http.StatusConflict, field: "outcomes[" + strconv.Itoa(i) + "].config_version",
					msg: fmt.Sprintf("%v; the %d outcomes before it were booked", err, i)}
			}
			s.fail(w, err)
			return
		}
		if q := b.Outcomes[i].Quality; q != nil {
			// Scored by the call's ID, as a grader would: credited to the
			// version it ran under, and judged like any score.
			if err := s.l.Score(id, rep.ID, *q); err != nil {
				s.o.Logger.Warn("selfimprove admin: an outcome's quality was not booked", "agent", id, "error", err)
			}
		}
		out.Booked++
		if j, ok := seen[id]; ok {
			out.Agents[j].ConfigVersion = rep.Version
			continue
		}
		seen[id] = len(out.Agents)
		out.Agents = append(out.Agents, AgentVersion{ID: id, Ref: Ref(id), ConfigVersion: rep.Version})
	}
	writeJSON(w, http.StatusOK, out)
}

// agentConfig serves GET /api/agents/{agent}/config, with an ETag, and
// 304 to a request whose If-None-Match names it.
func (s *server) agentConfig(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	if err := checkID(id); err != nil {
		s.fail(w, err)
		return
	}
	body, err := json.Marshal(AgentConfig{ID: id, Ref: Ref(id), Config: s.l.Config(id)})
	if err != nil {
		s.fail(w, err)
		return
	}
	sum := sha256.Sum256(body)
	tag := `"` + hex.EncodeToString(sum[:12]) + `"`
	w.Header().Set("ETag", tag)
	w.Header().Set("Cache-Control", "no-cache")
	if etagMatch(r.Header.Get("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(body, '\n'))
}

// checkID checks an agent ID of a path.
func checkID(id string) error {
	switch {
	case id == "":
		return bad("agent", "the agent ID is empty")
	case len(id) > selfimprove.MaxAgentIDLen:
		return bad("agent", "the agent ID is over %d bytes", selfimprove.MaxAgentIDLen)
	}
	return nil
}

// etagMatch reports whether an If-None-Match header names tag (or is
// "*"), comparing weakly as RFC 9110 asks.
func etagMatch(header, tag string) bool {
	for t := range strings.SplitSeq(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == tag {
			return true
		}
	}
	return false
}

// rateBound is a token bucket of outcomes: rate a second, up to burst.
type rateBound struct {
	mu          sync.Mutex
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newRateBound(rate float64, burst int) *rateBound {
	return &rateBound{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take takes n tokens at now, or reports how long until there are n.
func (b *rateBound) take(n int, now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if need := float64(n) - b.tokens; need > 0 {
		return time.Duration(need / b.rate * float64(time.Second)), false
	}
	b.tokens -= float64(n)
	return 0, true
}
