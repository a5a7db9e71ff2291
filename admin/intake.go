package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// Bounds of the outcome intake.
const (
	maxOutcomeError    = 4096            // bytes of an outcome's error text
	maxOutcomeCode     = 128             // bytes of its error code
	maxOutcomeID       = 128             // bytes of its ID
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
	// ID names the outcome, so that the intake books it once: an outcome
	// whose agent and ID are among the last Options.OutcomeIDs booked
	// is not booked again (OutcomeResult.Duplicates counts it), as when a
	// client sends a batch again after its answer was lost. At most 128
	// bytes of UTF-8; unique per outcome (the Python client sends 24 random
	// hex digits). Optional: an outcome without one is booked each time
	// it is sent.
	ID string `json:"id,omitempty"`
}

// OutcomeResult answers POST /api/outcomes.
type OutcomeResult struct {
	// Booked counts the outcomes booked: all of them but Duplicates.
	Booked int `json:"booked"`
	// Duplicates counts the outcomes not booked because one with their
	// agent and ID was booked before (Outcome.ID). Omitted when 0.
	Duplicates int `json:"duplicates,omitempty"`
	// Agents are the batch's agents, by first appearance, each with the
	// config version in force once the batch was booked: a client whose
	// config has another version reads it again.
	Agents []AgentVersion `json:"agents"`
}

// OutcomeConflict answers, with 409, a batch of POST /api/outcomes the
// loop booked in part: the outcomes before the one Field names
// (outcomes[i]) were booked, that one and those after it were not. A
// client sending the batch again sends none of the booked ones.
type OutcomeConflict struct {
	ErrorBody
	// Booked counts the outcomes booked: those before outcomes[Booked]
	// (those among them whose ID was booked before, at that time).
	Booked int `json:"booked"`
	// Retry says why outcomes[Booked] was not booked. false: the loop
	// refused it (a version the agent never had): drop it and send those
	// after it. true: the loop itself failed (a store it could not read,
	// the loop closing): send it and those after it again, later, as
	// after a 5xx.
	Retry bool `json:"retry"`
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

// at names the i-th outcome of a batch, or its field name.
func at(i int, name string) string {
	f := "outcomes[" + strconv.Itoa(i) + "]"
	if name != "" {
		f += "." + name
	}
	return f
}

// check checks o, the i-th outcome of a batch, by itself (its version
// is checked against the agent's with the loop's state), and returns the
// Report it books.
func (o *Outcome) check(i int) (selfimprove.Report, error) {
	var r selfimprove.Report
	f := func(name string) string { return at(i, name) }
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
	}
	if err := text(f("error"), o.Error, maxOutcomeError, false); err != nil {
		return r, err
	}
	if err := text(f("code"), o.Code, maxOutcomeCode, false); err != nil {
		return r, err
	}
	if err := text(f("id"), o.ID, maxOutcomeID, false); err != nil {
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

// lookup returns the highest config version the loop holds for id (the
// default config's for an agent it does not know), and whether it knows
// the agent.
func (s *server) lookup(id string) (int, bool) {
	h := s.l.History(id)
	if h == nil {
		return s.l.Config(id).Version, false
	}
	v := 0
	for _, c := range h {
		v = max(v, c.Version)
	}
	return v, true
}

// decodeBatch reads the batch of body into b, and returns the body. An
// error in an outcome names its index (outcomes[3].success).
func decodeBatch(body io.Reader, b *OutcomeBatch) ([]byte, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, decodeError(err, false, "")
	}
	return raw, decodeOutcomes(raw, b)
}

// decodeOutcomes is decodeBatch's decoding of raw.
func decodeOutcomes(raw []byte, b *OutcomeBatch) error {
	err := decodeJSON(raw, b, false, "")
	var br *badRequest
	if err == nil || !errors.As(err, &br) || br.status != http.StatusBadRequest || br.field == "" {
		return err
	}
	// An error inside an outcome: decode them one by one to name it.
	var elems struct {
		Outcomes []json.RawMessage `json:"outcomes"`
	}
	if json.Unmarshal(raw, &elems) != nil {
		return err
	}
	for i, e := range elems.Outcomes {
		var o Outcome
		if eerr := decodeJSON(e, &o, false, at(i, "")); eerr != nil {
			return eerr
		}
	}
	return err
}

// outcomes serves POST /api/outcomes: it checks the whole batch by
// itself, takes its outcomes from the rate bound, then checks it against
// the loop's state (the versions, the agents it would create) and books
// its outcomes in order. A batch refused before the rate bound read no
// state; one refused after it is charged like one booked.
func (s *server) outcomes(w http.ResponseWriter, r *http.Request, who role) {
	refuse := func(reason int, err error) {
		s.lim.refused[reason].Add(1)
		s.fail(w, err)
	}
	if who == roleIntake && s.lim.intakeAgents.empty() { // before reading the body: no agent is allowed
		refuse(refusedNotAllowed, s.lim.allowed(who, "", "outcomes"))
		return
	}
	if wait, ok := s.rate.has(1, s.o.Now()); !ok { // nothing left: refused before the body is read
		s.lim.refused[refusedRate].Add(1)
		tooMany(w, wait, "outcomes", fmt.Sprintf("admin.Options.OutcomeRate (%g outcomes a second)", s.o.OutcomeRate))
		return
	}
	var b OutcomeBatch
	raw, err := decodeBatch(r.Body, &b)
	if err != nil {
		refuse(refusedInvalid, err)
		return
	}
	if len(b.Outcomes) == 0 || len(b.Outcomes) > s.o.MaxOutcomes {
		refuse(refusedInvalid, nullNamed(raw, bad("outcomes", "outcomes must hold 1..%d outcomes", s.o.MaxOutcomes)))
		return
	}
	reps := make([]selfimprove.Report, len(b.Outcomes))
	for i := range b.Outcomes {
		var err error
		if reps[i], err = b.Outcomes[i].check(i); err != nil {
			refuse(refusedInvalid, nullNamed(raw, err))
			return
		}
		if err := s.lim.allowed(who, b.Outcomes[i].Agent, at(i, "agent")); err != nil {
			refuse(refusedNotAllowed, err)
			return
		}
	}
	if wait, ok := s.rate.take(len(reps), s.o.Now()); !ok {
		s.lim.refused[refusedRate].Add(1)
		tooMany(w, wait, "outcomes", fmt.Sprintf("admin.Options.OutcomeRate (%g outcomes a second)", s.o.OutcomeRate))
		return
	}
	created, ok := s.checkState(w, who, b.Outcomes)
	if !ok {
		return
	}
	s.book(w, r, b.Outcomes, reps, created)
}

// checkState checks the outcomes' versions against their agents', and
// takes the agents the batch would create from who's bucket (reading the
// state of no more agents than the bucket allows, plus one). It returns
// how many it took, or answers the request.
func (s *server) checkState(w http.ResponseWriter, who role, outs []Outcome) (int, bool) {
	versions := map[string]int{} // the highest version of each agent
	bucket, now := s.lim.newAgents[who], s.o.Now()
	created := 0
	for i := range outs {
		id := outs[i].Agent
		top, ok := versions[id]
		if !ok {
			var exists bool
			top, exists = s.lookup(id)
			versions[id] = top
			if !exists {
				created++
				if wait, ok := bucket.has(created, now); !ok {
					s.lim.refused[refusedNewAgents].Add(1)
					s.tooManyAgents(w, wait, i, created)
					return 0, false
				}
			}
		}
		if v := outs[i].ConfigVersion; v > top {
			s.lim.refused[refusedInvalid].Add(1)
			s.fail(w, bad(at(i, "config_version"), "%s: the agent never had version %d", at(i, "config_version"), v))
			return 0, false
		}
	}
	if created > 0 {
		if wait, ok := bucket.take(created, now); !ok { // another batch took them meanwhile
			s.lim.refused[refusedNewAgents].Add(1)
			s.tooManyAgents(w, wait, len(outs)-1, created)
			return 0, false
		}
	}
	return created, true
}

// tooManyAgents answers a batch whose i-th outcome is the n-th agent it
// would create, over the token's bucket.
func (s *server) tooManyAgents(w http.ResponseWriter, wait time.Duration, i, n int) {
	limit := fmt.Sprintf("admin.Options.IntakeNewAgents (%d new agents a minute for this token)", s.o.IntakeNewAgents)
	if n > s.o.IntakeNewAgents {
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusTooManyRequests, at(i, "agent"), fmt.Sprintf(
			"the batch names more than %d agents the loop does not know, more than %s allows at once: send them in smaller batches", s.o.IntakeNewAgents, limit))
		return
	}
	tooMany(w, wait, at(i, "agent"), limit)
}

// book books the checked outcomes in order and answers the batch.
func (s *server) book(w http.ResponseWriter, r *http.Request, outs []Outcome, reps []selfimprove.Report, created int) {
	s.lim.created.Add(int64(created))
	out := OutcomeResult{Agents: []AgentVersion{}}
	seen := map[string]int{}
	for i := range reps {
		id := outs[i].Agent
		rep, dup, err := s.bookOne(r.Context(), &outs[i], reps[i])
		if err != nil {
			s.lim.booked.Add(int64(out.Booked))
			s.failBooking(w, err, i)
			return
		}
		if dup {
			out.Duplicates++ // booked before: its answer was lost
			continue
		}
		out.Booked++
		if j, ok := seen[id]; ok {
			out.Agents[j].ConfigVersion = rep.Version
			continue
		}
		seen[id] = len(out.Agents)
		out.Agents = append(out.Agents, AgentVersion{ID: id, Ref: Ref(id), ConfigVersion: rep.Version})
	}
	s.lim.booked.Add(int64(out.Booked))
	writeJSON(w, http.StatusOK, out)
}

// bookOne books o (its report rep) and its quality, once for its ID: dup
// when an outcome with its agent and ID was booked before.
func (s *server) bookOne(ctx context.Context, o *Outcome, rep selfimprove.Report) (selfimprove.Report, bool, error) {
	if o.ID != "" {
		key, dup, err := s.ids.claim(ctx, o.Agent, o.ID)
		if dup || err != nil {
			return selfimprove.Report{}, dup, err
		}
		booked := false
		defer func() { s.ids.done(key, booked) }()
		res, err := s.record(ctx, o, rep)
		booked = err == nil
		return res, false, err
	}
	res, err := s.record(ctx, o, rep)
	return res, false, err
}

// record books o's report rep, and its quality when it has one.
func (s *server) record(ctx context.Context, o *Outcome, rep selfimprove.Report) (selfimprove.Report, error) {
	res, err := s.l.Record(ctx, o.Agent, rep)
	if err != nil {
		return res, err
	}
	if q := o.Quality; q != nil {
		// Scored by the call's ID, as a grader would: credited to the
		// version it ran under, and judged like any score; without a
		// key, each is a sample (the outcomes of a batch end at one
		// time, and share their call ID).
		if _, err := s.l.ScoreCall(o.Agent, res.ID, *q, 0); err != nil {
			s.o.Logger.Warn("selfimprove admin: an outcome's quality was not booked", "agent", o.Agent, "error", err)
		}
	}
	return res, nil
}

// failBooking answers a batch whose i-th outcome the loop did not book,
// the outcomes before it booked. With none booked, the loop's error as
// any (a 5xx: the batch can be sent again whole). With some booked, 409
// with an OutcomeConflict saying how many, so that a client sending the
// batch again never books those twice: Retry false for a version the
// agent never had (drop outcomes[i]), true for the loop's own failure (a
// store it cannot read, the loop closing: send outcomes[i] on, later).
func (s *server) failBooking(w http.ResponseWriter, err error, i int) {
	c := OutcomeConflict{ErrorBody: ErrorBody{Status: http.StatusConflict}, Booked: i}
	switch {
	case errors.Is(err, selfimprove.ErrUnknownVersion):
		c.Field = at(i, "config_version")
		c.Error = fmt.Sprintf("%s; the %d outcomes before it were booked", strings.TrimPrefix(err.Error(), "selfimprove: "), i)
	case i == 0:
		s.fail(w, err)
		return
	default:
		s.o.Logger.Error("selfimprove admin: the loop could not book an outcome", "outcome", at(i, ""), "booked", i, "error", err)
		c.Field, c.Retry = at(i, ""), true
		c.Error = fmt.Sprintf("the loop could not book %s (see its log); the %d outcomes before it were booked: "+
			"send %s and those after it again, later, not the %d booked", at(i, ""), i, at(i, ""), i)
	}
	writeJSON(w, http.StatusConflict, c)
}

// agentConfig serves GET /api/agents/{agent}/config, with an ETag, and
// 304 to a request whose If-None-Match names it. The intake token reads
// the configs of the agents of Options.IntakeAgents only.
func (s *server) agentConfig(w http.ResponseWriter, r *http.Request, who role) {
	id := r.PathValue("agent")
	if err := checkID(id); err != nil {
		s.fail(w, err)
		return
	}
	if err := s.lim.allowed(who, id, "agent"); err != nil {
		s.lim.refused[refusedNotAllowed].Add(1)
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
