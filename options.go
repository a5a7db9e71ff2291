package selfimprove

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// Option configures a Loop. New checks every option and fails, naming the
// option, when one is outside its documented range.
type Option func(*options)

type options struct {
	dir             string
	dirSet          bool // WithDir was given
	store           Store
	fileOpts        FileOptions // the default FileStore's, filled in by New
	traceMode       TraceMode
	traceQueue      int
	traceWait       time.Duration
	maxAgents       int
	memory          MemoryOptions
	breaker         CircuitBreaker
	breakerSet      bool
	clock           Clock
	clockSet        bool
	coarse          time.Duration
	strategy        Strategy
	strategySet     bool
	notifiers       []Notifier
	notifierSet     bool
	logger          *slog.Logger
	policy          RollbackPolicy
	probes          ProbePolicy
	routes          *Routes
	candidates      []Candidate
	exploration     Exploration
	defaultConfig   Config
	strategyTimeout time.Duration
	flushInterval   time.Duration
	notify          NotifyOptions
	summaryAt       time.Duration
	summaryOn       bool
	retry           RetryPolicy
	recentEvents    int
	noCallScores    bool // WithCallScores(false)
	fleet           Fleet
	fleetTimeout    time.Duration
	fleetInterval   time.Duration
	fleetCalls      int
	callSecret      []byte // WithCallIDSecret's; nil: the store's (see callKeys)
}

// defaults are the options before any Option is applied.
func defaults() options {
	return options{
		clock:           realClock{},
		strategyTimeout: 10 * time.Second,
		flushInterval:   10 * time.Second,
		traceQueue:      65536,
		traceWait:       time.Second,
		maxAgents:       10_000,
		recentEvents:    defaultRecentEvents,
		fleetTimeout:    DefaultFleetTimeout,
		fleetInterval:   DefaultFleetInterval,
		fleetCalls:      DefaultFleetCalls,
	}
}

// validate checks every option against its documented range and fills in
// the defaults that depend on others.
func (o *options) validate() error {
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidOption, name, fmt.Sprintf(format, args...))
	}
	switch {
	case o.dirSet && o.dir == "":
		return bad("WithDir", "empty directory: leave WithDir out for DefaultDir()")
	case o.dirSet && o.store != nil:
		return bad("WithDir", "given with WithStore, which sets the store: give the directory to the store (OpenFileStore) or leave one out")
	case o.traceMode < TracesOff || o.traceMode > TracesSync:
		return bad("WithTraces", "unknown mode %d", int(o.traceMode))
	case o.traceQueue < 1 || o.traceQueue > 1<<24:
		return bad("WithTraceQueue", "size %d not in 1..%d", o.traceQueue, 1<<24)
	case o.traceWait < 0:
		return bad("WithTraceQueue", "wait %v is negative", o.traceWait)
	case o.maxAgents < 1:
		return bad("WithMaxAgents", "%d is less than 1", o.maxAgents)
	case o.recentEvents < 1 || o.recentEvents > maxRecentEvents:
		return bad("WithRecentEvents", "%d not in 1..%d", o.recentEvents, maxRecentEvents)
	case o.coarse < 0 || o.coarse > time.Second:
		return bad("WithCoarseClock", "resolution %v not in (0, 1s]", o.coarse)
	case o.coarse > 0 && o.clockSet:
		return bad("WithCoarseClock", "cannot be combined with WithClock")
	case o.strategyTimeout <= 0:
		return bad("WithStrategyTimeout", "%v is not positive", o.strategyTimeout)
	case o.flushInterval < 0:
		return bad("WithFlushInterval", "%v is negative", o.flushInterval)
	case o.fleetTimeout <= 0:
		return bad("WithFleetTimeout", "%v is not positive", o.fleetTimeout)
	case o.fleetInterval < 0:
		return bad("WithFleetFlush", "interval %v is negative", o.fleetInterval)
	case o.fleetCalls < 1:
		return bad("WithFleetFlush", "calls %d is less than 1", o.fleetCalls)
	case o.callSecret != nil && (len(o.callSecret) < 16 || len(o.callSecret) > 64):
		return bad("WithCallIDSecret", "%d bytes, not 16 to 64", len(o.callSecret))
	case o.summaryOn && (o.summaryAt < 0 || o.summaryAt >= 24*time.Hour):
		return bad("WithDailySummary", "%v not in [0, 24h)", o.summaryAt)
	}
	if err := o.validatePolicies(); err != nil {
		return err
	}
	if err := validateNotifiers(o.notifiers); err != nil {
		return optionErr("WithNotifier", err)
	}
	o.fill()
	return nil
}

// validatePolicies checks the options that are structs, each field
// against its documented bound: the error names the option and the field.
func (o *options) validatePolicies() error {
	var breaker, routes error
	if o.breakerSet {
		breaker = o.breaker.validate()
	}
	if o.routes != nil {
		routes = o.routes.validate()
		if o.routes.Off {
			routes = firstErr(routes, fieldErr("Off", "given to WithRoutes: Off keeps one agent off the ladder, with Loop.SetRoutes"))
		}
	}
	for _, p := range []struct {
		name string
		err  error
	}{
		{"WithMemory", o.memory.validate()},
		{"WithCircuitBreaker", breaker},
		{"WithNotifyOptions", o.notify.validate()},
		{"WithRetryPolicy", o.retry.validate()},
		{"WithRollbackPolicy", o.policy.validate()},
		{"WithProbes", o.probes.validate()},
		{"WithRoutes", routes},
		{"WithCandidates", checkCandidates(o.candidates)},
		{"WithExploration", o.exploration.validate()},
		{"WithDefaultConfig", firstErr(o.defaultConfig.validate(), checkVersion(o.defaultConfig.Version, 1))},
	} {
		if p.err != nil {
			return optionErr(p.name, p.err)
		}
	}
	return nil
}

// fill sets the defaults that depend on other options.
func (o *options) fill() {
	if o.clock == nil {
		o.clock = realClock{}
	}
	if !o.strategySet {
		o.strategy = &BuiltinStrategy{}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	o.logger = scrubbing(o.logger)
	if o.breakerSet {
		if o.breaker.Failures == 0 {
			o.breaker.Failures = 5
		}
		if o.breaker.CoolOff == 0 {
			o.breaker.CoolOff = 30 * time.Second
		}
	}
}

// validate checks m's fields against their bounds.
func (m MemoryOptions) validate() error {
	return firstErr(
		inRange("MaxClusters", m.MaxClusters, 0, maxMemoryClusters),
		inRange("HalfLife", m.HalfLife, 0, maxWindow),
	)
}

// validate checks n's fields against their bounds.
func (n NotifyOptions) validate() error {
	return firstErr(
		inRange("Queue", n.Queue, 0, maxNotifyQueue),
		inRange("Attempts", n.Attempts, 0, maxNotifyAttempts),
		inRange("Backoff", n.Backoff, 0, time.Hour),
		inRange("MaxBackoff", n.MaxBackoff, 0, time.Hour),
		atMost("BurstLimit", n.BurstLimit, maxNotifyQueue),
		inRange("BurstWindow", n.BurstWindow, 0, 24*time.Hour),
		inRange("Timeout", n.Timeout, 0, time.Hour),
	)
}

// The bounds of MemoryOptions and NotifyOptions.
const (
	maxMemoryClusters = 1_000_000
	maxNotifyQueue    = 1 << 20
	maxNotifyAttempts = 100
)

// WithDir sets the state directory of the default FileStore, which takes
// the defaults of FileOptions. Default (without WithDir) DefaultDir(). New
// fails with ErrInvalidOption for an empty dir (an unset environment
// variable, most likely: leave WithDir out for the default), and for
// WithDir beside WithStore, which sets the store itself: a FileStore
// tuned otherwise (log rotation, the bound on agent files) is given as
// WithStore(OpenFileStore(dir, FileOptions{...})).
func WithDir(dir string) Option { return func(o *options) { o.dir, o.dirSet = dir, true } }

// WithStore sets where the loop keeps its state and logs, instead of a
// FileStore on WithDir: WithStore(NewRAMStore()) keeps them in RAM, and
// nothing survives the process. The Loop closes the store on Close.
// Default: a FileStore on DefaultDir().
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithTraces turns on the trace log: one record per call (agent, config
// version, outcome, duration, attempts, error text, time). See TraceMode
// for what each mode costs and what a crash can lose. Default TracesOff.
func WithTraces(mode TraceMode) Option { return func(o *options) { o.traceMode = mode } }

// WithTraceQueue bounds the traces waiting for the writer (size, default
// 65,536, range 1 to 16,777,216) and how long a call waits for room when
// the writer falls behind, or, in TracesSync mode, for its trace to be
// written (wait, default 1s, not negative). A trace that waits longer is
// dropped, counted in Metrics.TracesDropped, logged, and reported in
// Report.LoopErr.
func WithTraceQueue(size int, wait time.Duration) Option {
	return func(o *options) { o.traceQueue, o.traceWait = size, wait }
}

// WithMaxAgents bounds the agents kept in memory (default 10,000, at
// least 1; about 4 KiB each, 11 KiB at worst). A call that brings a new
// agent over the cap first saves and evicts an idle agent (an approximate
// least-recently-used order; the call waits for that at most a second,
// with its agent's load, and the save then finishes in the background),
// which is reloaded from the store on its next call once saved. Agents
// with an analysis running or events not yet logged stay until the next
// periodic flush finds them idle. With WithFleet, a
// replica also keeps what it had booked of the fleet's calls for up to n
// agents evicted (about 250 bytes each), so that an agent loaded again
// books the other replicas' calls made meanwhile; an agent whose calls
// have not gone to the fleet stays until the next flush sends them, up to
// n/4+1 agents beyond n, beyond which (or while the fleet cannot be
// reached) it is evicted with its counts kept for its next load.
func WithMaxAgents(n int) Option { return func(o *options) { o.maxAgents = n } }

// WithClock sets the clock. Default (and nil): the real clock, time.Now.
func WithClock(c Clock) Option { return func(o *options) { o.clock, o.clockSet = c, true } }

// WithCoarseClock makes the loop read the time from a value refreshed every
// resolution while calls are made, instead of reading the clock twice a
// call: a reading costs a few atomic loads. The refresh runs on a
// goroutine that stops when the loop has been idle for 64 resolutions (no
// timer runs then) and starts again with the next call. Readings carry the
// monotonic clock. Call durations, windows, cooldowns, verification and
// traces are then exact to within the resolution, which makes it fit for
// calls of a millisecond or more with a resolution of 1ms. Default off;
// the resolution must be in (0, 1s]; it cannot be combined with WithClock.
func WithCoarseClock(resolution time.Duration) Option {
	return func(o *options) { o.coarse = resolution }
}

// WithStrategy sets the strategy that proposes tweaks. Default
// &BuiltinStrategy{} (its default caps, no fallback routes). With nil the loop only tracks: it reports
// ImprovementTriggered and applies nothing.
func WithStrategy(s Strategy) Option {
	return func(o *options) { o.strategy, o.strategySet = s, true }
}

// WithNotifier sets where events go: each of ns gets every event, in
// turn, with its own retries, so that one that succeeded is not sent an
// event again when another fails. Nil notifiers are skipped; with none
// (WithNotifier() or WithNotifier(nil)) notifications are off, and events
// are still stored. Given more than once, the last one counts. Default:
// events are logged through the loop's logger (WithLogger), rollbacks at
// level Warn. New calls each notifier's Validate method, if it has one
// (see Notifier); the senders of package notify check their URLs there.
func WithNotifier(ns ...Notifier) Option {
	ns = slices.DeleteFunc(slices.Clone(ns), func(n Notifier) bool { return n == nil })
	return func(o *options) { o.notifiers, o.notifierSet = ns, true }
}

// validateNotifiers calls the Validate method of each notifier that has
// one (see Notifier) and returns the first error.
func validateNotifiers(ns []Notifier) error {
	for _, n := range ns {
		if v, ok := n.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				return err
			}
		}
	}
	return nil
}

// WithLogger sets the logger for the loop's own failures and, by default,
// its events. Default (and nil): slog.Default(). The loop logs through
// a handler around l's that runs failure.Scrub over every error value
// (and every string under the key "error") it logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRollbackPolicy sets the verification policy. Default: the zero
// RollbackPolicy, whose fields take their documented defaults; New
// checks each field's range, and names the field it refuses.
func WithRollbackPolicy(p RollbackPolicy) Option { return func(o *options) { o.policy = p } }

// WithDefaultConfig sets the config a new agent starts with, at version 1.
// Default: the zero Config, one attempt, no deadline, no backoff. New
// checks its fields as SetConfig does (see Config), and refuses a Version
// other than 0 or 1, with an error wrapping ErrInvalidOption and
// ErrInvalidConfig that names the field.
func WithDefaultConfig(c Config) Option { return func(o *options) { o.defaultConfig = c.clone() } }

// WithStrategyTimeout bounds how long the strategy may take, and so how
// long a triggering call can be delayed by it. Default 10s; it must be
// positive.
func WithStrategyTimeout(d time.Duration) Option { return func(o *options) { o.strategyTimeout = d } }

// WithFlushInterval sets how often the rolling-window counts of agents that
// ran are saved; decisions are always saved at once. Default 10s. A crash
// loses at most this much of the window counts, never a config change. 0
// turns the periodic saves off: window counts are then saved with the
// agent's next decision, eviction, or Close. Negative is refused.
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flushInterval = d } }

// WithCircuitBreaker turns on a circuit breaker for every agent. Default
// off. The zero CircuitBreaker takes the defaults (5 failures, 30s); a
// field outside its bound (see CircuitBreaker) is refused, named.
func WithCircuitBreaker(b CircuitBreaker) Option {
	return func(o *options) { o.breaker, o.breakerSet = b, true }
}

// WithMemory sets the failure memory's bounds. The memory is always on.
// Default: the zero MemoryOptions (10,000 clusters, a 7-day half-life);
// a field outside its bound (see MemoryOptions) is refused, named.
func WithMemory(m MemoryOptions) Option { return func(o *options) { o.memory = m } }

// WithDailySummary sends the DailySummary to the notifier every day at
// the given offset into the UTC day (9*time.Hour: at 09:00 UTC), as an
// EventDailySummary. Default off; the offset must be in [0, 24h).
func WithDailySummary(at time.Duration) Option {
	return func(o *options) { o.summaryAt, o.summaryOn = at, true }
}

// WithNotifyOptions tunes the delivery of events: queue size, retries,
// digests, the deadline of each attempt. Default: the zero
// NotifyOptions, whose fields take their documented defaults; a field
// outside its bound (see NotifyOptions) is refused, named.
func WithNotifyOptions(n NotifyOptions) Option { return func(o *options) { o.notify = n } }

// DefaultDir returns the state directory used without WithDir:
// $XDG_STATE_HOME/selfimprove when XDG_STATE_HOME is set, else
// ~/.local/state/selfimprove on Unix, and os.UserConfigDir()/selfimprove
// elsewhere.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "selfimprove"), nil
	}
	if runtime.GOOS != "windows" && runtime.GOOS != "darwin" && runtime.GOOS != "plan9" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("selfimprove: default state directory: %w", err)
		}
		return filepath.Join(home, ".local", "state", "selfimprove"), nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("selfimprove: default state directory: %w", err)
	}
	return filepath.Join(d, "selfimprove"), nil
}

// WithRetryPolicy sets which failures the loop retries and how long it
// may wait for a server that asks for a pause. Default: the zero
// RetryPolicy, whose fields take their documented defaults (auth,
// bad_request, context_length, content_filter, not_found,
// model_unavailable and quota are not retried; a server's wait is
// honoured up to one minute); a field outside its bound (see
// RetryPolicy) is refused, named.
func WithRetryPolicy(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// WithProbes sets the probe policy (see ProbePolicy). New fails with
// ErrInvalidOption, naming the field, for a field outside its bound.
func WithProbes(p ProbePolicy) Option {
	return func(o *options) { p.NoHold = slices.Clone(p.NoHold); o.probes = p }
}

// WithRoutes sets every agent's route ladder (see Routes), unless
// Loop.SetRoutes gives an agent its own (or keeps it off every ladder:
// Routes.Off). Default: the zero Routes, no ladder. New fails with ErrInvalidOption, naming the field, for more
// than 15 fallbacks or 64 models, or a route or model over 256 bytes or
// not UTF-8.
func WithRoutes(r Routes) Option {
	return func(o *options) { rc := r.clone(); o.routes = &rc }
}

// WithCandidates gives every agent the candidates cs (see Candidate),
// unless Loop.SetCandidates gives an agent its own. Default: none. New
// fails with ErrInvalidOption, naming the field, for more than 16
// candidates, a name over 64 bytes, a route or Params outside the bounds
// of Config, or a candidate that sets neither a route nor params.
func WithCandidates(cs ...Candidate) Option {
	return func(o *options) { o.candidates = cloneCandidates(cs) }
}

// WithExploration turns the exploration of the agents' candidates on
// (see Exploration). Default: off. New fails with ErrInvalidOption,
// naming the field, for a Share outside [0, 0.5] or a MinSamples outside
// [0, 1,000,000].
func WithExploration(x Exploration) Option {
	return func(o *options) { o.exploration = x }
}

// WithRecentEvents sets how many of the latest events the loop keeps in
// memory for Events and Subscribe, in 1..1,048,576. Default 1,000. The
// event log (events.jsonl, see ReadEvents) keeps them all; New starts the
// recent events with the newest of the store's (see eventHistory), so
// they reach back past a restart.
func WithRecentEvents(n int) Option { return func(o *options) { o.recentEvents = n } }

// WithCallScores(false) gives the Loop's calls no place for a score or a
// cost inside fn, for the leanest successful call: AddScore with fn's
// context returns ErrUnknownCall, AddCost adds to the call's Budget only,
// and calls are scored by ID (Loop.Score) or their costs reported with
// Record. Default true: every tracked call carries one, at 33 bytes a
// call, allocated 31 calls' at a time (see docs/quality.md).
func WithCallScores(on bool) Option { return func(o *options) { o.noCallScores = !on } }

// WithFleet shares each agent's state with the other replicas attached to
// f (see Fleet and docs/fleet.md). Default: none; the Loop keeps its state
// to itself.
func WithFleet(f Fleet) Option { return func(o *options) { o.fleet = f } }

// WithCallIDSecret keys the check of the loop's call IDs (Report.ID,
// which Loop.Score takes) with secret, 16 to 64 bytes, in place of the
// state directory's secret (the document "call-id-key", made at the
// first start) or, under WithFleet, the fixed one a fleet otherwise
// shares. Every replica of a fleet sets the same secret: each then takes
// the others' call IDs, and an ID made up without it is refused (but for
// one in 65,536), as a lone loop's are. Without it a fleet's IDs are
// bound to their agent, but anyone who reads this package can make one
// (docs/fleet.md). Keep the secret with the fleet's other credentials;
// changing it makes the IDs handed out before unscorable. Default none.
func WithCallIDSecret(secret []byte) Option {
	return func(o *options) { o.callSecret = append([]byte{}, secret...) }
}

// WithFleetTimeout bounds what one call or operator method waits on the
// fleet in all: the operations of one decision (lease, reload, commit,
// release), its tries and its wait for another save of the agent share
// it; each background operation (a flush) has its own. Default
// DefaultFleetTimeout (500 ms); it must be positive. See docs/fleet.md.
func WithFleetTimeout(d time.Duration) Option { return func(o *options) { o.fleetTimeout = d } }

// WithFleetFlush sets how often the counts of the calls go to the fleet:
// every interval (0: only when calls calls are waiting, and on SyncFleet
// and Close), or as soon as calls calls are waiting. Default
// DefaultFleetInterval (200 ms) and DefaultFleetCalls (1,024); calls must
// be at least 1.
func WithFleetFlush(interval time.Duration, calls int) Option {
	return func(o *options) { o.fleetInterval, o.fleetCalls = interval, calls }
}
