package selfimprove

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"
	"unicode/utf8"
)

// Config is an agent's tunable configuration. The loop passes it to the
// wrapped function on every call and enforces the fields it understands:
//
//   - Timeout bounds each attempt with a context deadline (0: no deadline).
//   - MaxAttempts is how many attempts one call may make (0 or 1: one).
//   - Backoff is the base wait between attempts, doubled after each attempt,
//     with jitter, and cut short when the caller's context ends (0: no wait).
//   - FirstTokenTimeout bounds the wait for a streamed answer's first token
//     within each attempt (0: no bound); see the field.
//
// Route and Params are for the wrapped function to read: which model,
// endpoint or tool variant to use, and anything else it can be tuned by.
//
// Every field has a bound (below), so that every config the loop stores
// reads back from its state file as it was. SetConfig, WithDefaultConfig
// (in New), Approve and the strategy's tweaks refuse a config outside
// them with an error wrapping ErrInvalidConfig that names the field, as
// in "config.backoff: 100h0m0s, more than 1h".
//
// A Config value is immutable once handed to the loop: the loop copies
// Params when it stores a Config, and the wrapped function must not modify
// the Params map it is given. The zero Config is valid: one attempt, no
// deadline, no backoff.
type Config struct {
	// Version numbers the configs an agent has run under. The loop assigns
	// it; versions of one agent are never reused, so a version names
	// exactly one config. Rolling back reinstates the earlier config with
	// its earlier version. SetConfig takes 0, or the agent's current
	// version (a config read with Loop.Config and edited), and refuses any
	// other; WithDefaultConfig takes 0 or 1; a strategy's tweak may carry
	// any (the loop gives the tweak the next version).
	Version int
	// Timeout is the deadline of each attempt; 0 means none, and it is
	// at most 24 hours. The wrapped function must honour its context for
	// the deadline to take effect.
	Timeout time.Duration
	// MaxAttempts is the number of attempts per call; 0 and 1 mean one,
	// and it is at most 100.
	MaxAttempts int
	// Backoff is the base delay between attempts: before attempt k+1 the
	// loop waits a random duration in [d/2, d] with d = Backoff×2^(k-1),
	// capped at one hour. 0 (the default) means the LLM SDKs' wait after
	// a transient failure (the server's wait, else 0.5 s doubled with
	// jitter, up to 8 s; see RetryPolicy) and a retry at once after any
	// other; Backoff itself is at most one hour. A wait that would pass
	// the caller's deadline is not slept: the call returns the failure.
	Backoff time.Duration
	// Route names the model, endpoint or tool variant fn should use: at
	// most 256 bytes of UTF-8, as a route of Routes.
	Route string
	// Params holds any other setting fn reads: at most 16 entries, each
	// name at most 64 bytes and each value at most 256, 2,048 bytes of
	// names and values in all, all UTF-8.
	Params map[string]string
	// FirstTokenTimeout is the deadline of each attempt's first token,
	// apart from Timeout, which bounds the whole attempt; 0 (the default)
	// means none. fn reports its first token with stream.FirstToken (the
	// integrations' Stream helpers do). When the deadline passes first,
	// the loop cancels the attempt, with failure.ErrFirstTokenTimeout as
	// its context's cause, and counts its failure as
	// failure.ClassFirstTokenTimeout, which is retried like a timeout but
	// never makes the built-in strategy raise Timeout. Set it only for an
	// agent whose fn reports its first token: an attempt that reports none
	// is cancelled at the deadline. At most one hour.
	FirstTokenTimeout time.Duration
}

// The bounds of a Config's fields (Route's is maxRouteLen). Together
// they keep a state file, whose hundred-odd configs (the current one,
// backups, changes, rejected tweaks, proposals) JSON may escape to six
// times their size, well within maxStateFile.
const (
	// maxTimeout bounds Timeout.
	maxTimeout = 24 * time.Hour
	// maxBackoff bounds Backoff, and caps a single wait between attempts.
	maxBackoff = time.Hour
	// maxAttemptsLimit bounds MaxAttempts, so that a runaway strategy
	// cannot make one call retry forever.
	maxAttemptsLimit = 100
	// maxParams bounds the entries of Params; maxParamName and
	// maxParamValue, each name and value, in bytes; maxParamBytes, all
	// of them together.
	maxParams     = 16
	maxParamName  = 64
	maxParamValue = 256
	maxParamBytes = 2048
	// maxFirstTokenTimeout bounds FirstTokenTimeout.
	maxFirstTokenTimeout = time.Hour
)

// attempts returns the number of attempts c allows, at least one.
func (c Config) attempts() int {
	if c.MaxAttempts < 1 {
		return 1
	}
	return c.MaxAttempts
}

// Equal reports whether c and o set the same values, ignoring Version.
// MaxAttempts 0 and 1 are equal, and so are a nil and an empty Params.
func (c Config) Equal(o Config) bool {
	return c.Timeout == o.Timeout &&
		c.attempts() == o.attempts() &&
		c.Backoff == o.Backoff &&
		c.Route == o.Route &&
		c.FirstTokenTimeout == o.FirstTokenTimeout &&
		maps.Equal(c.Params, o.Params)
}

// clone returns c with its own copy of Params.
func (c Config) clone() Config {
	if c.Params != nil {
		c.Params = maps.Clone(c.Params)
	}
	return c
}

// validate reports whether c can be enforced and stored: every field
// within its bound (Version aside, which the loop assigns). The error
// wraps ErrInvalidConfig and names the field.
func (c Config) validate() error {
	err := firstErr(
		inRange("config.timeout", c.Timeout, 0, maxTimeout),
		inRange("config.max_attempts", c.MaxAttempts, 0, maxAttemptsLimit),
		inRange("config.backoff", c.Backoff, 0, maxBackoff),
		checkText("config.route", c.Route, maxRouteLen),
		checkParams(c.Params),
		inRange("config.first_token_timeout", c.FirstTokenTimeout, 0, maxFirstTokenTimeout),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// checkVersion refuses a Version a caller set (see Config.Version): it
// must be 0, or cur, the version of the config the caller edited.
func checkVersion(v, cur int) error {
	if v != 0 && v != cur {
		return fmt.Errorf("%w: config.version: %d, neither 0 nor %d: the loop assigns versions", ErrInvalidConfig, v, cur)
	}
	return nil
}

// checkParams checks Params's bounds. Of several bad entries it names
// the one whose name sorts first, so that the error does not depend on
// the map's order.
func checkParams(ps map[string]string) error {
	if len(ps) > maxParams {
		return fieldErr("config.params", "%d entries, more than %d", len(ps), maxParams)
	}
	var bad error
	badKey, total := "", 0
	for k, v := range ps {
		total += len(k) + len(v)
		ok := len(k) <= maxParamName && len(v) <= maxParamValue && utf8.ValidString(k) && utf8.ValidString(v)
		if !ok && (bad == nil || k < badKey) {
			f := "config.params[" + quoteCut(k, maxQuoted) + "]"
			bad, badKey = firstErr(checkText(f+" name", k, maxParamName), checkText(f, v, maxParamValue)), k
		}
	}
	if bad == nil && total > maxParamBytes {
		bad = fieldErr("config.params", "%d bytes of names and values, more than %d", total, maxParamBytes)
	}
	return bad
}

// configJSON is Config's JSON form. Durations are written as Go duration
// strings ("1.5s") so that state files are readable; on input a number of
// nanoseconds is accepted as well.
type configJSON struct {
	Version     int               `json:"version"`
	Timeout     jsonDuration      `json:"timeout,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Backoff     jsonDuration      `json:"backoff,omitempty"`
	Route       string            `json:"route,omitempty"`
	Params      map[string]string `json:"params,omitempty"`
	// FirstToken is FirstTokenTimeout; a file written before it has none.
	FirstToken jsonDuration `json:"first_token_timeout,omitempty"`
}

// MarshalJSON encodes c with durations as strings such as "1.5s".
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{
		Version:     c.Version,
		Timeout:     jsonDuration(c.Timeout),
		MaxAttempts: c.MaxAttempts,
		Backoff:     jsonDuration(c.Backoff),
		Route:       c.Route,
		Params:      c.Params,
		FirstToken:  jsonDuration(c.FirstTokenTimeout),
	})
}

// UnmarshalJSON decodes the form MarshalJSON writes; durations may also be
// given as integer nanoseconds.
func (c *Config) UnmarshalJSON(b []byte) error {
	var j configJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Config{
		Version:     j.Version,
		Timeout:     time.Duration(j.Timeout),
		MaxAttempts: j.MaxAttempts,
		Backoff:     time.Duration(j.Backoff),
		Route:       j.Route,
		Params:      j.Params,

		FirstTokenTimeout: time.Duration(j.FirstToken),
	}
	return nil
}

// jsonDuration is a time.Duration written as a string and read from a
// string or an integer number of nanoseconds.
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Duration(d).String()), nil
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("selfimprove: duration %q: %w", s, err)
		}
		*d = jsonDuration(v)
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("selfimprove: duration %s: want a string like \"1.5s\" or integer nanoseconds", b)
	}
	*d = jsonDuration(v)
	return nil
}

// ChangeState is where a Change stands.
type ChangeState string

// The change states.
const (
	ChangeVerifying  ChangeState = "verifying"   // applied, under verification
	ChangeConfirmed  ChangeState = "confirmed"   // passed verification, kept
	ChangeRolledBack ChangeState = "rolled_back" // regressed, previous config restored
	ChangeSuperseded ChangeState = "superseded"  // replaced by SetConfig during verification
)

// Change is one config change the loop applied to an agent: from which
// config to which, why, the stats before it and under it, and how its
// verification ended. A Change handed out by the loop is a copy.
type Change struct {
	// ID is unique across processes (a UUIDv7) and sorts by time.
	ID      string `json:"id"`
	AgentID string `json:"agent_id"`
	// From is the config that was replaced (its backup); To is the config
	// installed. Their Version fields are the from and to versions.
	From Config `json:"from"`
	To   Config `json:"to"`
	// Reason is the strategy's reason for the tweak, at most 512 bytes:
	// a longer one is cut at a rune boundary and ends with "…".
	Reason string `json:"reason"`
	// Before is the reference the change is judged against: the recent
	// regime when it was applied (see RollbackPolicy), or the analysis
	// window under SeedCompatible and for changes set by an operator.
	// After counts the calls credited to the new version.
	Before Stats `json:"before"`
	After  Stats `json:"after"`
	// Window is the agent's analysis-window stats when the change was
	// applied; nil for changes set by an operator.
	Window *Stats `json:"window,omitempty"`
	// Control counts the calls that ran the previous config while the
	// change was verified by MethodCanary; nil when there were none.
	Control *Stats `json:"control,omitempty"`
	// AppliedAt and DecidedAt are UTC times; DecidedAt is zero while
	// verifying.
	AppliedAt time.Time   `json:"applied_at"`
	DecidedAt time.Time   `json:"decided_at,omitzero"`
	State     ChangeState `json:"state"`
	// Verdict is the policy's reason for confirming or rolling back,
	// empty while verifying; cut like Reason to 512 bytes.
	Verdict string `json:"verdict,omitempty"`
	// Cluster is the ID of the failure cluster the change addresses (the
	// tweak's, or Analysis.Trigger, or the agent's largest; for a move
	// down the route ladder, the cluster of the failures on the route it
	// leaves), if any.
	Cluster string `json:"cluster,omitempty"`
	// ProposalID names the approved proposal the change applies, if any.
	ProposalID string `json:"proposal_id,omitempty"`
	// CostAccepted says a person approved the change knowing it raised
	// the cost per successful call (a Proposal with CostRise): the cost
	// rule (RollbackPolicy.MaxCostRise) does not judge it.
	CostAccepted bool `json:"cost_accepted,omitempty"`
}

// repeats reports whether moving from cur to next repeats the rolled-back
// tweak rb: every field next changes (Timeout, MaxAttempts, Backoff, Route,
// Params, FirstTokenTimeout) takes rb's value. A strategy that proposes the
// same route on top of a config that has changed since is so refused all
// the same.
func repeats(cur, next, rb Config) bool {
	moved := false
	check := func(changed, same bool) bool {
		moved = moved || changed
		return !changed || same
	}
	return check(next.Timeout != cur.Timeout, next.Timeout == rb.Timeout) &&
		check(next.attempts() != cur.attempts(), next.attempts() == rb.attempts()) &&
		check(next.Backoff != cur.Backoff, next.Backoff == rb.Backoff) &&
		check(next.Route != cur.Route, next.Route == rb.Route) &&
		check(next.FirstTokenTimeout != cur.FirstTokenTimeout, next.FirstTokenTimeout == rb.FirstTokenTimeout) &&
		check(!maps.Equal(next.Params, cur.Params), maps.Equal(next.Params, rb.Params)) && moved
}

// maxRouteLen bounds a route's name, in bytes, and a model's.
const maxRouteLen = 256

// Stats summarises an agent's calls. Counts cover the agent's analysis
// window (Window), measured in 64 time buckets, so the oldest edge is exact
// to within Window/64; ConsecutiveFailures, TotalCalls and Ignored are exact.
type Stats struct {
	// Calls and Failures count the calls that ended in the window. Calls
	// cancelled by the caller's own context are not counted (see Ignored).
	Calls    int `json:"calls"`
	Failures int `json:"failures"`
	// SuccessRate is (Calls-Failures)/Calls, and 1 when there are no calls.
	SuccessRate float64 `json:"success_rate"`
	// AvgLatency is TotalLatency/Calls over all counted calls, failed ones
	// included; 0 when there are no calls.
	AvgLatency time.Duration `json:"avg_latency_ns"`
	// TotalLatency is the sum of the counted calls' durations (all
	// attempts and the waits between them).
	TotalLatency time.Duration `json:"total_latency_ns"`
	// SuccessLatency is the sum of the successful calls' durations. It is
	// counted for the calls under verification and for the recent regime
	// a change is judged against; 0 elsewhere (the analysis window).
	SuccessLatency time.Duration `json:"success_latency_ns,omitempty"`
	// ConsecutiveFailures counts the failures since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// Profile is the threshold profile in force; Window is its analysis
	// window.
	Profile Profile       `json:"profile,omitempty"`
	Window  time.Duration `json:"window_ns,omitempty"`
	// CallsPerDay counts calls in the last 24 hours (to within 15 minutes);
	// it picks the frequency profile.
	CallsPerDay int `json:"calls_per_day,omitempty"`
	// TotalCalls and Ignored count every call since the agent's state began:
	// counted calls, and calls cancelled by their caller.
	TotalCalls int64 `json:"total_calls,omitempty"`
	Ignored    int64 `json:"ignored,omitempty"`
	// Scored counts the calls scored (Loop.Score, Loop.AddScore) under a
	// config version, Quality is their mean score and QualitySD the
	// scores' standard deviation (both 0 when none). Costed counts the
	// calls that reported a cost (AddCost), Cost is their total, and
	// CostPerSuccess is Cost over the successful calls among them (0 when
	// none). They are those of one config version: the config in force
	// for Loop.Stats, AgentView and Analysis, the versions compared for
	// Evidence and Change.
	Scored         int     `json:"scored,omitempty"`
	Quality        float64 `json:"quality,omitempty"`
	QualitySD      float64 `json:"quality_sd,omitempty"`
	Costed         int     `json:"costed,omitempty"`
	Cost           float64 `json:"cost,omitempty"`
	CostPerSuccess float64 `json:"cost_per_success,omitempty"`
}
