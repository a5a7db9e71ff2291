// Package selfimprove wraps agent calls (an LLM chain, a tool call, any
// function) in a loop that learns from their failures safely.
//
// ExecuteWithImprovement runs the call under the agent's current Config
// (enforcing its timeout, retries and backoff), tracks the agent's
// rolling-window success rate, latency and consecutive failures in O(1),
// and, when failures cross the agent's adaptive Threshold, asks a Strategy
// for a config Tweak. The loop applies the tweak as a new config version,
// verifies it on the calls that follow, and rolls it back automatically
// when the RollbackPolicy finds a regression. Every decision is stored in
// crash-safe JSON files before the call that made it returns, and reported
// to a Notifier asynchronously.
//
// Every failure is scrubbed of secrets (Scrub), classified (Classify) and
// clustered by its Signature; the loop scores each agent's Health and
// spots SharedCauses across agents. The built-in strategy
// (DefaultStrategy) applies the safe tweak for the dominant class of
// failure, and files a Proposal for a person to Approve or Reject when no
// safe tweak is left. SlackNotifier, TelegramNotifier and WebhookNotifier
// deliver events, with retries, digests of bursts and a daily summary.
//
// The wrapped call comes first: the loop never changes its result, never
// hides its error, and never lets the loop's own machinery (storage,
// strategy, notifier, panics in them) fail it or block it beyond a bounded
// time. Such failures are logged, counted in Metrics and returned in
// Report.LoopErr.
package selfimprove

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the loop the time. Every time the loop uses comes from it,
// each call's duration included (taken as the difference of two readings,
// so a clock whose readings carry Go's monotonic clock measures durations
// immune to wall-clock steps). Windows, cooldowns and stored times use the
// wall-clock part. Deadlines and backoff waits are timers of the Go
// runtime; under testing/synctest they run on the bubble's fake time.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Errors of the loop's own machinery. They never replace the wrapped
// call's error: they come back in Report.LoopErr, or from the Loop's
// methods.
var (
	// ErrClosed: the Loop was closed. Calls still run fn, untracked.
	ErrClosed = errors.New("selfimprove: loop closed")
	// ErrStrategyTimeout: the strategy did not answer within its timeout;
	// a late answer is discarded.
	ErrStrategyTimeout = errors.New("selfimprove: strategy timed out")
	// ErrStrategyPanic: the strategy panicked; the panic was recovered.
	ErrStrategyPanic = errors.New("selfimprove: strategy panicked")
	// ErrTweakRejected: the strategy proposed a tweak the loop will not
	// apply (one rolled back before, the current config, or invalid).
	ErrTweakRejected = errors.New("selfimprove: tweak not applied")
	// ErrStale: the agent's config changed while the strategy ran, so its
	// tweak was not applied.
	ErrStale = errors.New("selfimprove: config changed during analysis")
)

// Report says what one ExecuteWithImprovement call did.
type Report struct {
	// Success reports whether fn finally returned nil.
	Success bool
	// Ignored reports that the call was not counted because the caller's
	// own context ended (cancelled or past its deadline) before fn
	// succeeded: that is the caller's choice, not the agent's failure.
	Ignored bool
	// Err is fn's final error, unchanged (nil on success).
	Err error
	// Duration is the whole call: every attempt and the waits between.
	Duration time.Duration
	// Attempts is how many times fn ran.
	Attempts int
	// ConfigVersion is the version of the config fn ran under.
	ConfigVersion int
	// Arm is the arm of a canary verification (MethodCanary) the call ran
	// in: ArmChange under the change being verified, ArmControl under the
	// config before it. It is ArmNone when no canary verification was
	// under way. The call is credited to its arm's version.
	Arm Arm
	// ImprovementTriggered reports that this call's failure crossed the
	// agent's threshold and the strategy ran (or, with no strategy, would
	// have run).
	ImprovementTriggered bool
	// Improvement is the change applied during this call, else nil. It is
	// also nil when the caller's context ended while the strategy was
	// still running; the change then lands later, with its event.
	Improvement *Change
	// Rollback is the change rolled back during this call, else nil.
	Rollback *Change
	// Confirmed is the change whose verification passed during this call,
	// else nil.
	Confirmed *Change
	// LoopErr is an error of the loop's own machinery during this call
	// (storage, strategy), never fn's. The call's result stands regardless.
	LoopErr error
	// BudgetExhausted reports that retries stopped because the call's
	// Budget was spent.
	BudgetExhausted bool
}

// Metrics counts what the loop's machinery did since New, including its
// failures, which are also logged.
type Metrics struct {
	Improvements, Confirmations, Rollbacks int64
	StrategyRuns, StrategyErrors           int64 // errors include panics and timeouts
	StrategyPanics, StrategyTimeouts       int64
	StoreErrors                            int64
	Notified, NotifyErrors, NotifyPanics   int64
	NotifyDropped                          int64
	RejectedTweaks                         int64 // tweaks the loop refused to apply
	Traces, TracesDropped                  int64 // traces written; traces lost (also logged)
	Agents                                 int64 // agents in memory now
	Loads, Evictions                       int64 // agents loaded from the store; idle agents evicted
}

type metrics struct {
	improvements, confirmations, rollbacks atomic.Int64
	strategyRuns, strategyErrors           atomic.Int64
	strategyPanics, strategyTimeouts       atomic.Int64
	storeErrors                            atomic.Int64
	notified, notifyErrors, notifyPanics   atomic.Int64
	notifyDropped, rejectedTweaks          atomic.Int64
	traces, tracesDropped                  atomic.Int64
	agents, loads, evictions               atomic.Int64
}

// Option configures a Loop.
type Option func(*options)

type options struct {
	dir             string
	store           Store
	fileOpts        FileOptions
	traceMode       TraceMode
	traceQueue      int
	traceWait       time.Duration
	maxAgents       int
	memory          MemoryOptions
	breaker         CircuitBreaker
	clock           Clock
	strategy        Strategy
	strategySet     bool
	notifier        Notifier
	notifierSet     bool
	logger          *slog.Logger
	policy          RollbackPolicy
	defaultConfig   Config
	strategyTimeout time.Duration
	notifyTimeout   time.Duration
	flushInterval   time.Duration
	notify          NotifyOptions
	summaryAt       time.Duration
	summaryOn       bool
}

// WithDir sets the state directory. Without it the loop uses DefaultDir().
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithStore sets where the loop keeps its state and logs, instead of a
// FileStore on WithDir. The Loop closes the store on Close.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithMemoryStore keeps everything in memory (a new MemoryStore): nothing
// survives the process.
func WithMemoryStore() Option { return WithStore(NewMemoryStore()) }

// WithLogRotation sets when the default FileStore rotates events.jsonl and
// traces.jsonl (at maxSize bytes; default 64 MiB) and how many gzip
// archives of each it keeps (default 5).
func WithLogRotation(maxSize int64, keep int) Option {
	return func(o *options) { o.fileOpts.MaxLogSize, o.fileOpts.KeepArchives = maxSize, keep }
}

// WithTraces turns on the trace log: one record per call (agent, config
// version, outcome, duration, attempts, error text, time). See TraceMode
// for what each mode costs and what a crash can lose. Default TracesOff.
func WithTraces(mode TraceMode) Option { return func(o *options) { o.traceMode = mode } }

// WithTraceQueue bounds the traces waiting for the writer (default 65,536)
// and how long a call waits for room when the writer falls behind, or, in
// TracesSync mode, for its trace to be written (default 1s). A trace that
// waits longer is dropped, counted in Metrics.TracesDropped, logged, and
// reported in Report.LoopErr.
func WithTraceQueue(size int, wait time.Duration) Option {
	return func(o *options) { o.traceQueue, o.traceWait = size, wait }
}

// WithMaxAgents bounds the agents kept in memory (default 10,000, about
// 3.4 KiB each, 11 KiB at worst). When more are live, the least recently
// used are saved and evicted, and reloaded from the store on their next
// call. Agents with an analysis running or events not yet logged stay.
func WithMaxAgents(n int) Option { return func(o *options) { o.maxAgents = n } }

// WithClock sets the clock; the default is the real clock (time.Now).
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithStrategy sets the strategy that proposes tweaks. Without it the loop
// uses DefaultStrategy(). With nil the loop only tracks: it reports
// ImprovementTriggered and applies nothing.
func WithStrategy(s Strategy) Option {
	return func(o *options) { o.strategy, o.strategySet = s, true }
}

// WithNotifier sets where events go. The default is LogNotifier with the
// loop's logger; nil turns notifications off (events are still stored).
func WithNotifier(n Notifier) Option {
	return func(o *options) { o.notifier, o.notifierSet = n, true }
}

// WithLogger sets the logger for the loop's own failures and, by default,
// its events. The default (and nil) is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRollbackPolicy sets the verification policy. The default is the zero
// RollbackPolicy, whose fields take their documented defaults.
func WithRollbackPolicy(p RollbackPolicy) Option { return func(o *options) { o.policy = p } }

// WithDefaultConfig sets the config a new agent starts with (its Version is
// ignored; a new agent starts at version 1). The default is the zero
// Config: one attempt, no deadline, no backoff.
func WithDefaultConfig(c Config) Option { return func(o *options) { o.defaultConfig = c.clone() } }

// WithStrategyTimeout bounds how long the strategy may take, and so how
// long a triggering call can be delayed by it. Default 10s.
func WithStrategyTimeout(d time.Duration) Option { return func(o *options) { o.strategyTimeout = d } }

// WithNotifyTimeout bounds each delivery attempt to the notifier, and how
// long Close waits for the queue to drain. Default 5s.
func WithNotifyTimeout(d time.Duration) Option { return func(o *options) { o.notifyTimeout = d } }

// WithFlushInterval sets how often the rolling-window counts of agents that
// ran are saved; decisions are always saved at once. Default 10s. A crash
// loses at most this much of the window counts, never a config change.
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flushInterval = d } }

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

// Loop is the self-improvement loop. It is safe for concurrent use. Create
// it with New and release it with Close.
type Loop struct {
	// Read by every call.
	clock    Clock
	realTime bool           // clock is the default real clock
	isClosed atomic.Bool    // Close has begun
	traces   *traceWriter   // nil when traces are off
	breaker  CircuitBreaker // off when Failures is 0
	agents   sync.Map       // agent ID → *agent

	strategy        Strategy
	pol             RollbackPolicy // with its defaults
	canaryCut       uint64         // MethodCanary: a call runs the control arm when its hash is below
	mem             *memory
	memLoaded       atomic.Bool // the saved memory was read (or there was none)
	log             *slog.Logger
	store           Store
	disp            *dispatcher // nil when notifications are off
	maxAgents       int
	sweep           chan struct{} // asks flushLoop to evict; capacity 1
	defaultConfig   Config
	strategyTimeout time.Duration

	shared   shared        // failures by cluster and class across agents
	props    proposalIndex // where proposals are
	seed     maphash.Seed
	createMu [32]sync.Mutex // serialises loading of the agents that hash to it

	m *metrics

	bgMu        sync.Mutex // guards closed and bg.Add
	closed      bool
	bg          sync.WaitGroup // analyses in flight
	stopFlush   chan struct{}
	flushDone   chan struct{}
	summaryDone chan struct{} // nil without WithDailySummary
	closeOnce   sync.Once
	closeErr    error
}

// agent is one agent's live state.
type agent struct {
	id  string
	cfg atomic.Pointer[installed] // current config, immutable

	saveMu sync.Mutex // serialises saves: held while snapshotting and writing

	mu        sync.Mutex // guards the fields below; held only for O(1) bookkeeping
	s         agentState
	dirty     bool  // window counts changed since the last save
	analyzing bool  // a strategy is running for this agent
	evicted   bool  // removed from the registry: use a fresh agent
	lastUsed  int64 // Unix ns of the last call, for eviction
	// openUntil mirrors s.CircuitOpenUntil for calls, which read it
	// without the lock; probing is set while a half-open circuit's probe
	// runs.
	openUntil atomic.Int64
	probing   atomic.Bool
	pending   []queued // events not yet logged, in decision order
}

// queued is an event waiting for the log; notified is set when the
// notifier already had it.
type queued struct {
	ev       *Event
	notified bool
}

// installed is a config with the generation it was installed as. While a
// change is verified by MethodCanary, prev is the config before it, which
// the calls Loop.arm picks run; seq numbers those calls.
type installed struct {
	Config
	gen  uint64
	prev *Config
	seq  atomic.Uint64
}

// arm picks the arm of the next call under in: a deterministic hash of the
// canary seed, the generation and the call's number, below canaryCut for
// the control arm.
func (l *Loop) arm(in *installed) Arm {
	if splitmix(l.pol.CanarySeed+in.gen*0x9e3779b97f4a7c15+in.seq.Add(1)) < l.canaryCut {
		return ArmControl
	}
	return ArmChange
}

// splitmix is the SplitMix64 finaliser.
func splitmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Arm is the arm of a canary verification a call ran in.
type Arm uint8

// The arms.
const (
	ArmNone    Arm = iota // no canary verification was under way
	ArmChange             // the call ran the config under verification
	ArmControl            // the call ran the config before it
)

// String returns "", "change" or "control".
func (a Arm) String() string {
	switch a {
	case ArmNone:
		return ""
	case ArmChange:
		return "change"
	case ArmControl:
		return "control"
	}
	return fmt.Sprintf("Arm(%d)", int(a))
}

// installLocked makes c a's current config, as a new generation.
func (a *agent) installLocked(l *Loop, c Config) {
	a.s.Config = c
	a.s.Gen++
	a.publishLocked(l)
}

// publishLocked publishes a's current config and generation to calls,
// with the previous config while a change is verified by MethodCanary.
func (a *agent) publishLocked(l *Loop) {
	in := &installed{Config: a.s.Config.clone(), gen: a.s.Gen}
	if v := a.s.Verifying; v != nil && l.pol.Method == MethodCanary {
		prev := v.From.clone()
		in.prev = &prev
	}
	a.cfg.Store(in)
}

// New opens (creating it if needed) the state directory and returns a
// Loop. Agents are loaded lazily, on their first call.
func New(opts ...Option) (*Loop, error) {
	o := options{
		clock:           realClock{},
		strategyTimeout: 10 * time.Second,
		notifyTimeout:   5 * time.Second,
		flushInterval:   10 * time.Second,
		traceQueue:      65536,
		traceWait:       time.Second,
		maxAgents:       10_000,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	if !o.strategySet {
		o.strategy = DefaultStrategy()
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if err := o.defaultConfig.validate(); err != nil {
		return nil, err
	}
	o.defaultConfig.Version = 1
	m := new(metrics)
	st := o.store
	if st == nil {
		if o.dir == "" {
			d, err := DefaultDir()
			if err != nil {
				return nil, err
			}
			o.dir = d
		}
		o.fileOpts.Clock, o.fileOpts.Logger = o.clock, o.logger
		o.fileOpts.OnError = func(error) { m.storeErrors.Add(1) }
		o.fileOpts.MaxMemorySize = max(o.fileOpts.MaxMemorySize, int64(o.memory.MaxClusters)*memoryFileBytesPerCluster)
		fs, err := OpenFileStore(o.dir, o.fileOpts)
		if err != nil {
			return nil, err
		}
		st = fs
	}
	l := &Loop{
		clock:           o.clock,
		realTime:        o.clock == Clock(realClock{}),
		strategy:        o.strategy,
		pol:             o.policy.withDefaults(),
		mem:             newMemory(o.memory),
		breaker:         o.breaker,
		log:             o.logger,
		store:           st,
		defaultConfig:   o.defaultConfig,
		strategyTimeout: o.strategyTimeout,
		seed:            maphash.MakeSeed(),
		m:               m,
		maxAgents:       max(o.maxAgents, 1),
		sweep:           make(chan struct{}, 1),
		stopFlush:       make(chan struct{}),
		flushDone:       make(chan struct{}),
	}
	if l.pol.Method == MethodCanary {
		l.canaryCut = uint64(math.Ldexp(l.pol.CanaryFraction, 64))
	}
	if err := l.loadMemory(); err != nil {
		// Not fatal: the memory is not saved until it has been read, so
		// the saved one is never overwritten; flushes retry the read.
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot read the failure memory; will retry", "error", err)
	}
	if o.traceMode != TracesOff {
		l.traces = newTraceWriter(st, o.logger, l.m, o.traceMode, max(o.traceQueue, 1), o.traceWait)
	}
	n := o.notifier
	if !o.notifierSet {
		n = LogNotifier{Logger: o.logger}
	}
	if n != nil {
		l.disp = newDispatcher(n, o.logger, o.notifyTimeout, o.notify, l.m)
	}
	go l.flushLoop(o.flushInterval)
	if o.summaryOn && l.disp != nil {
		l.summaryDone = make(chan struct{})
		go l.summaryLoop(o.summaryAt)
	}
	return l, nil
}

// Close stops the loop: it waits for strategies in flight (each bounded by
// the strategy timeout), writes the pending traces, saves every agent with
// unsaved changes, delivers the queued events (for at most the notify
// timeout) and closes the store, which releases the directory. It returns
// the errors it met. Calls made after Close still run fn, untracked, with
// Report.LoopErr ErrClosed. Close is idempotent.
func (l *Loop) Close() error {
	l.closeOnce.Do(func() {
		l.bgMu.Lock()
		l.closed = true
		l.bgMu.Unlock()
		l.isClosed.Store(true)
		l.bg.Wait()
		close(l.stopFlush)
		<-l.flushDone
		if l.summaryDone != nil {
			<-l.summaryDone
		}
		if l.traces != nil {
			l.traces.close()
		}
		errs := []error{l.flush()}
		if l.disp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.disp.timeout)
			errs = append(errs, l.disp.close(ctx))
			cancel()
		}
		errs = append(errs, l.store.Close())
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// Metrics returns the loop's counters.
func (l *Loop) Metrics() Metrics {
	m := l.m
	return Metrics{
		Improvements: m.improvements.Load(), Confirmations: m.confirmations.Load(), Rollbacks: m.rollbacks.Load(),
		StrategyRuns: m.strategyRuns.Load(), StrategyErrors: m.strategyErrors.Load(),
		StrategyPanics: m.strategyPanics.Load(), StrategyTimeouts: m.strategyTimeouts.Load(),
		StoreErrors: m.storeErrors.Load(),
		Notified:    m.notified.Load(), NotifyErrors: m.notifyErrors.Load(), NotifyPanics: m.notifyPanics.Load(),
		NotifyDropped: m.notifyDropped.Load(), RejectedTweaks: m.rejectedTweaks.Load(),
		Traces: m.traces.Load(), TracesDropped: m.tracesDropped.Load(),
		Agents: m.agents.Load(), Loads: m.loads.Load(), Evictions: m.evictions.Load(),
	}
}

// agent returns the live agent for id, loading it from the store on first
// use. On a read error it returns nil and the error; on a corrupt state
// file it returns a fresh agent and the error.
func (l *Loop) agent(id string) (*agent, error) {
	if v, ok := l.agents.Load(id); ok {
		return v.(*agent), nil
	}
	mu := &l.createMu[maphash.String(l.seed, id)%uint64(len(l.createMu))]
	mu.Lock()
	defer mu.Unlock()
	if v, ok := l.agents.Load(id); ok {
		return v.(*agent), nil
	}
	a := &agent{id: id}
	err := l.store.LoadAgent(id, func(data []byte) error {
		var st agentState
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
		if err := st.check(id); err != nil {
			return err
		}
		a.s = st
		return nil
	})
	switch {
	case err == nil:
		l.m.loads.Add(1)
		for _, c := range a.s.Clusters {
			l.shared.observe(id, c.ID, []byte(c.Sig), c.Class, c.Last, a.s.Tracker.Win.Width*windowSlots)
		}
		l.props.note(id, a.s.Proposals)
	case errors.Is(err, fs.ErrNotExist):
		a.s, err = newState(id, l.defaultConfig.clone()), nil
	case errors.Is(err, ErrCorruptState):
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: agent state was corrupt; starting afresh", "agent", id, "error", err)
		a.s = newState(id, l.defaultConfig.clone())
	default:
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot load agent state", "agent", id, "error", err)
		return nil, err
	}
	a.lastUsed = l.clock.Now().UnixNano()
	a.openUntil.Store(a.s.CircuitOpenUntil)
	a.publishLocked(l)
	l.agents.Store(id, a)
	if n := l.m.agents.Add(1); n > int64(l.maxAgents) {
		select {
		case l.sweep <- struct{}{}:
		default:
		}
	}
	return a, err
}

// lockAgent returns id's live agent, locked. An agent evicted between the
// lookup and the lock is looked up again.
func (l *Loop) lockAgent(a *agent, id string) (*agent, error) {
	for {
		if a == nil {
			var err error
			if a, err = l.agent(id); a == nil {
				return nil, err
			}
		}
		a.mu.Lock()
		if !a.evicted {
			return a, nil
		}
		a.mu.Unlock()
		a = nil
	}
}

// eachAgent calls f for each live agent in memory, with its lock held.
func (l *Loop) eachAgent(f func(a *agent)) {
	l.agents.Range(func(_, v any) bool {
		a := v.(*agent)
		a.mu.Lock()
		if !a.evicted {
			f(a)
		}
		a.mu.Unlock()
		return true
	})
}

// ExecuteWithImprovement runs fn under agentID's current config and returns
// fn's final error unchanged, with a Report of what the loop did.
//
// The loop enforces the config: each attempt gets a context with the
// config's Timeout, a failed attempt is retried up to MaxAttempts with
// exponential Backoff, and retries stop when ctx ends. A panic in fn is
// recorded as a failure and re-panicked. A call whose ctx ended before
// fn succeeded is recorded as ignored, not as a failure.
//
// After fn returns, the loop records the outcome against the config
// version fn ran under. If a change is under verification, the outcome may
// confirm it or roll it back; otherwise a failure that crosses the agent's
// threshold runs the strategy (at most once at a time per agent) and may
// apply a tweak. Decisions are saved before ExecuteWithImprovement
// returns. The common case (a call with no change under verification and
// no threshold crossed) allocates nothing and does no I/O; with
// TracesSync it waits for its trace to be fsynced, with other callers'.
func (l *Loop) ExecuteWithImprovement(ctx context.Context, agentID string, fn func(ctx context.Context, cfg Config) error) (Report, error) {
	var rep Report
	if l.isClosed.Load() {
		rep.LoopErr = ErrClosed
		cfg := l.defaultConfig
		if v, ok := l.agents.Load(agentID); ok {
			cfg = v.(*agent).cfg.Load().Config
		}
		rep.ConfigVersion = cfg.Version
		start := l.clock.Now()
		rep.Attempts, rep.Err = l.runUntracked(ctx, &cfg, fn)
		_, rep.Duration = l.since(start)
		rep.Success = rep.Err == nil
		return rep, rep.Err
	}
	a, err := l.agent(agentID)
	var (
		cfg *Config
		gen uint64
	)
	probe := false
	if a != nil {
		if a.openUntil.Load() != 0 { // set only with a breaker
			var ok bool
			if probe, ok = l.admit(a); !ok {
				rep.Err = ErrCircuitOpen
				rep.ConfigVersion = a.cfg.Load().Version
				return rep, ErrCircuitOpen
			}
		}
		inst := a.cfg.Load()
		cfg, gen = &inst.Config, inst.gen
		if inst.prev != nil {
			if rep.Arm = l.arm(inst); rep.Arm == ArmControl {
				cfg = inst.prev
			}
		}
	} else {
		// The agent's state cannot be read: run fn untracked under the
		// default config rather than fail the call.
		c := l.defaultConfig
		cfg = &c
	}
	rep.LoopErr = err
	rep.ConfigVersion = cfg.Version
	start := l.clock.Now()
	var (
		pv       any
		panicked bool
	)
	rep.Attempts, pv, panicked, rep.Err, rep.BudgetExhausted = l.run(ctx, cfg, fn)
	var end time.Time
	end, rep.Duration = l.since(start)
	rep.Success = rep.Err == nil
	rep.Ignored = !rep.Success && !panicked && ctx.Err() != nil
	var text string
	switch {
	case panicked:
		text = keepText(fmt.Sprintf("panic: %v", pv))
	case !rep.Success:
		text = errText(rep.Err)
	}
	if a != nil {
		if !rep.Success && !rep.Ignored {
			// Classified and signed before the agent's lock is taken.
			var buf [4 * maxSignature]byte
			sig := appendSignature(buf[:0], text)
			l.record(ctx, a, gen, probe, cfg.Version, end, &rep, text, failInfo{classify(rep.Err, text), clusterID(sig)}, sig)
		} else {
			l.record(ctx, a, gen, probe, cfg.Version, end, &rep, text, failInfo{}, nil)
		}
		if l.traces != nil {
			l.trace(agentID, cfg.Version, end, &rep, text)
		}
	}
	if panicked {
		panic(pv)
	}
	return rep, rep.Err
}

// since returns the time now and the time elapsed since start. With the
// default clock it reads the monotonic clock only (time.Since), which costs
// half a time.Now, and derives the end time from start.
func (l *Loop) since(start time.Time) (time.Time, time.Duration) {
	if l.realTime {
		d := time.Since(start)
		return start.Add(d), d
	}
	end := l.clock.Now()
	return end, end.Sub(start)
}

// Execute is ExecuteWithImprovement for a function that returns a value:
// it returns the value of fn's last attempt, the Report and fn's error.
func Execute[T any](ctx context.Context, l *Loop, agentID string, fn func(context.Context, Config) (T, error)) (T, Report, error) {
	var out T
	rep, err := l.ExecuteWithImprovement(ctx, agentID, func(ctx context.Context, c Config) error {
		v, err := fn(ctx, c)
		out = v
		return err
	})
	return out, rep, err
}

// runUntracked runs fn under cfg; a panic propagates.
func (l *Loop) runUntracked(ctx context.Context, cfg *Config, fn func(context.Context, Config) error) (int, error) {
	n, pv, panicked, err, _ := l.run(ctx, cfg, fn)
	if panicked {
		panic(pv)
	}
	return n, err
}

// run makes the attempts cfg allows, and the call's Budget, if any. It
// stops at the first success, at a panic (returned, not re-raised), or
// when ctx ends. A retry's context carries an Attempt (see AttemptInfo).
func (l *Loop) run(ctx context.Context, cfg *Config, fn func(context.Context, Config) error) (attempts int, pv any, panicked bool, err error, exhausted bool) {
	pv, panicked, err = attempt(ctx, cfg, fn)
	if err == nil || panicked || cfg.attempts() <= 1 || ctx.Err() != nil {
		return 1, pv, panicked, err, false
	}
	return l.retry(ctx, cfg, fn, err)
}

// retry makes the attempts after a failed first one; see run. Each
// attempt's context is ctx with an Attempt about the one before.
func (l *Loop) retry(ctx context.Context, cfg *Config, fn func(context.Context, Config) error, err error) (attempts int, pv any, panicked bool, _ error, exhausted bool) {
	budget, _ := ctx.Value(budgetKey{}).(*Budget)
	for attempts = 1; attempts < cfg.attempts(); {
		if budget != nil && !budget.allows(attempts+1) {
			return attempts, nil, false, err, true
		}
		if d := backoff(cfg.Backoff, attempts); d > 0 && l.sleep(ctx, d) != nil {
			break
		}
		text := errText(err)
		attempts++
		actx := context.WithValue(ctx, attemptKey{}, &Attempt{Number: attempts, LastErr: err,
			LastClass: classify(err, text), Memories: l.mem.similar(text, attemptMemories, l.clock.Now().UnixNano())})
		if pv, panicked, err = attempt(actx, cfg, fn); err == nil || panicked || ctx.Err() != nil {
			return attempts, pv, panicked, err, false
		}
	}
	return attempts, nil, false, err, false
}

// attemptMemories is how many memories an Attempt carries.
const attemptMemories = 3

// Sleeper is an optional method of a Clock: Sleep waits d, or until ctx
// ends and then returns ctx's error. The loop waits between attempts with
// it; a simulated clock can advance itself instead of waiting. Without
// it the loop waits on a runtime timer.
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// sleep waits d on the clock, or until ctx ends.
func (l *Loop) sleep(ctx context.Context, d time.Duration) error {
	if s, ok := l.clock.(Sleeper); ok {
		return s.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt runs fn once, under cfg's per-attempt deadline, catching a panic.
func attempt(ctx context.Context, cfg *Config, fn func(context.Context, Config) error) (pv any, panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			pv, panicked = r, true
			err = &panicError{r}
		}
	}()
	if cfg.Timeout > 0 {
		actx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		return nil, false, fn(actx, *cfg)
	}
	return nil, false, fn(ctx, *cfg)
}

// backoff returns the wait after the given attempt: uniform in [d/2, d]
// with d = base×2^(attempt-1), capped at maxBackoff.
func backoff(base time.Duration, attempt int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	half := d / 2
	return half + rand.N(d-half+1)
}

// pending is the work a call must do after releasing the agent's lock.
type pending struct {
	decided  *Change   // confirmed or rolled back during this call
	event    *Event    // its event, queued for the log
	analysis *Analysis // a strategy run to start
	th       Threshold
}

// trace hands the call's trace to the writer.
func (l *Loop) trace(agentID string, version int, end time.Time, rep *Report, text string) {
	t := Trace{Time: end, AgentID: agentID, Version: version, Outcome: OutcomeSuccess, Duration: rep.Duration, Attempts: rep.Attempts, Err: text}
	switch {
	case rep.Ignored:
		t.Outcome = OutcomeIgnored
	case !rep.Success:
		t.Outcome = OutcomeFailure
	}
	if err := l.traces.add(&t); err != nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
	}
}

// failInfo is what the loop derives from a failed call before booking it:
// its class and the hash of its signature.
type failInfo struct {
	class Class
	id    uint64
}

// record books one call (an ignored one only as such) and acts on it. sig
// is the failure's signature, in the caller's scratch buffer.
func (l *Loop) record(ctx context.Context, a *agent, gen uint64, probe bool, version int, end time.Time, rep *Report, text string, fi failInfo, sig []byte) {
	failed := !rep.Success
	endN := end.UnixNano()

	var p pending
	a, err := l.lockAgent(a, a.id)
	if a == nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
		return
	}
	a.lastUsed = endN
	if rep.Ignored {
		a.s.Tracker.Ignored++
		a.dirty = true
		if probe {
			a.probing.Store(false) // let another call probe
		}
		a.mu.Unlock()
		return
	}
	s := &a.s
	tgen := gen
	if rep.Arm == ArmControl {
		// The previous config's calls never count toward the new
		// config's trigger.
		tgen--
	}
	s.Tracker.record(tgen, endN, rep.Duration, failed, version, text, uint32(fi.id))
	var window int64
	if failed {
		s.observeCluster(fi.id, sig, fi.class, text, endN)
		window = s.Tracker.Win.Width * windowSlots
	}
	a.dirty = true
	moved := (failed || probe) && l.breaker.Failures > 0 && l.breakerLocked(a, probe, failed, end)
	if v := s.Verifying; v != nil {
		if gen == s.Gen {
			if rep.Arm == ArmControl {
				s.Control.add(rep.Duration, failed)
			} else {
				s.Verify.add(rep.Duration, failed)
			}
			switch verdict := l.pol.Decide(s.evidence()); verdict.Decision {
			case DecisionRollback:
				p.decided = l.rollbackLocked(a, end, verdict.Reason)
				p.event = a.queueLocked(l.newEvent(EventRolledBack, a.id, p.decided))
			case DecisionConfirm:
				p.decided = l.confirmLocked(a, end, verdict.Reason)
				p.event = a.queueLocked(l.newEvent(EventChangeConfirmed, a.id, p.decided))
			}
		}
	} else if failed && !a.analyzing && gen == s.Gen && endN >= s.CooldownUntil {
		th, prof := l.thresholdLocked(a, endN)
		if s.Tracker.failuresOf(gen, endN-int64(th.Window)) >= th.Failures {
			a.analyzing = true
			p.th = th
			p.analysis = l.analysisLocked(a, end, th, prof)
		}
	}
	a.mu.Unlock()
	if failed {
		l.shared.observe(a.id, fi.id, sig, fi.class, endN, window)
		l.mem.observe(a.id, fi.id, sig, fi.class, endN)
	}

	switch {
	case p.decided != nil:
		l.decide(ctx, a, p, rep)
	case p.analysis != nil:
		rep.ImprovementTriggered = true
		l.startAnalysis(ctx, a, p, rep)
	case moved:
		if err := l.persist(a); err != nil {
			rep.LoopErr = errors.Join(rep.LoopErr, err)
		}
	}
}

// thresholdLocked resolves a's threshold at time now and keeps the window's
// bucket width in step with it.
func (l *Loop) thresholdLocked(a *agent, now int64) (Threshold, Profile) {
	s := &a.s
	var manual *Threshold
	if s.Manual != nil {
		t := s.Manual.threshold()
		manual = &t
	}
	th, prof := thresholdFor(manual, s.Critical, s.Tracker.Day.sum(now))
	s.Tracker.Win.resize(slotWidth(th.Window))
	return th, prof
}

// statsLocked returns a's window stats at time now.
func (l *Loop) statsLocked(a *agent, now int64) Stats {
	th, prof := l.thresholdLocked(a, now)
	st := a.s.Tracker.stats(now)
	st.Profile, st.Window = prof, th.Window
	return st
}

func (l *Loop) analysisLocked(a *agent, now time.Time, th Threshold, prof Profile) *Analysis {
	s := &a.s
	n := now.UnixNano()
	st := s.Tracker.stats(n)
	st.Profile, st.Window = prof, th.Window
	fails := s.Tracker.recentFailures(n-int64(th.Window), func(lo uint32) (Class, string) {
		if c := s.clusterOf(lo); c != nil {
			return c.Class, formatClusterID(c.ID)
		}
		return "", ""
	})
	return &Analysis{
		AgentID:   a.id,
		Config:    s.Config.clone(),
		Stats:     st,
		Threshold: th,
		Failures:  fails,
		Clusters:  s.clustersLocked(n),
		Health:    s.Tracker.health(n),
		Rejected:  slices.Clone(s.Rejected),
		Time:      now.UTC(),
	}
}

// rollbackLocked restores the config before the change under verification
// and returns the decided change.
func (l *Loop) rollbackLocked(a *agent, now time.Time, reason string) *Change {
	s := &a.s
	ch := l.decideLocked(a, now, ChangeRolledBack, reason)
	a.installLocked(l, ch.From.clone())
	if n := len(s.History); n > 0 && s.History[n-1].Version == ch.From.Version {
		s.History = s.History[:n-1]
	}
	s.Rejected = appendBounded(s.Rejected, Tweak{Config: ch.To, Reason: ch.Reason}, maxRejected)
	return ch
}

// confirmLocked ends verification, keeping the change; under
// MethodCanary, calls stop running the previous config.
func (l *Loop) confirmLocked(a *agent, now time.Time, reason string) *Change {
	ch := l.decideLocked(a, now, ChangeConfirmed, reason)
	a.publishLocked(l)
	return ch
}

// decideLocked closes the change under verification with state and reason.
func (l *Loop) decideLocked(a *agent, now time.Time, state ChangeState, reason string) *Change {
	s := &a.s
	ch := s.verifyingLocked()
	ch.State, ch.Verdict, ch.DecidedAt = state, reason, now.UTC()
	s.endVerify()
	l.rememberFix(&ch, FixOutcome(state), ch.DecidedAt)
	s.Changes = appendBounded(s.Changes, ch, maxChanges)
	s.closeProposalLocked(&ch, now)
	return &ch
}

// decide saves a decision made during a call, then reports and announces it.
func (l *Loop) decide(ctx context.Context, a *agent, p pending, rep *Report) {
	switch p.event.Type {
	case EventRolledBack:
		l.m.rollbacks.Add(1)
		rep.Rollback = p.decided
	case EventChangeConfirmed:
		l.m.confirmations.Add(1)
		rep.Confirmed = p.decided
	}
	if err := l.persist(a); err != nil {
		rep.LoopErr = errors.Join(rep.LoopErr, err)
		if p.event.Type == EventRolledBack {
			// The rollback stands in memory. Its event stays queued, and
			// so does this one, for the next save that succeeds; the
			// notifier hears of the failure now.
			ev := l.newEvent(EventRollbackFailed, a.id, p.decided)
			ev.Err = err.Error()
			a.mu.Lock()
			a.pending = append(a.pending, queued{ev, true})
			a.mu.Unlock()
			l.notify(ev)
		}
	}
}

// queueLocked queues ev for the log; a.mu is held.
func (a *agent) queueLocked(ev *Event) *Event {
	a.pending = append(a.pending, queued{ev: ev})
	return ev
}

// startAnalysis runs the strategy for a in the background and waits for it
// while ctx lasts. The strategy's own deadline bounds the wait.
func (l *Loop) startAnalysis(ctx context.Context, a *agent, p pending, rep *Report) {
	l.bgMu.Lock()
	if l.closed {
		l.bgMu.Unlock()
		a.mu.Lock()
		a.analyzing = false
		a.mu.Unlock()
		return
	}
	l.bg.Add(1)
	l.bgMu.Unlock()
	type result struct {
		ch  *Change
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer l.bg.Done()
		ch, err := l.analyze(ctx, a, p.analysis, p.th)
		done <- result{ch, err}
	}()
	select {
	case r := <-done:
		rep.Improvement = r.ch
		if r.err != nil {
			rep.LoopErr = errors.Join(rep.LoopErr, r.err)
		}
	case <-ctx.Done():
		// The caller has gone; the analysis finishes on its own and
		// announces its outcome with an event.
	}
}

// analyze runs the strategy under its deadline, starts the cooldown and
// applies the tweak, if any.
func (l *Loop) analyze(ctx context.Context, a *agent, an *Analysis, th Threshold) (*Change, error) {
	var (
		tw  *Tweak
		err error
	)
	an.Shared = l.shared.causes(an.Time.UnixNano(), a.id, true)
	if top := largest(an.Clusters); top != nil {
		an.Memories = l.mem.similar(top.Signature, analysisMemories, an.Time.UnixNano())
	}
	if l.strategy != nil {
		l.m.strategyRuns.Add(1)
		tw, err = l.callStrategy(ctx, an)
		if err != nil {
			l.m.strategyErrors.Add(1)
			l.log.Warn("selfimprove: strategy failed", "agent", a.id, "error", err)
		}
	}
	if err == nil && tw != nil && tw.Review {
		// Saved before the proposal is, so that the list of agents with
		// proposals covers it.
		err = l.addProposalAgent(a.id)
	}
	now := l.clock.Now()
	a.mu.Lock()
	a.analyzing = false
	a.s.CooldownUntil = now.UnixNano() + int64(th.Cooldown)
	var (
		ch *Change
		ev *Event
	)
	if err == nil && tw != nil && tw.Review {
		if p, isNew := l.fileLocked(a, an, tw, now); isNew {
			l.props.note(a.id, []Proposal{*p})
			a.queueLocked(l.proposalEvent(EventProposalFiled, p, now))
		}
	} else if err == nil && tw != nil {
		ch, err = l.applyLocked(a, an, tw, now)
		if err != nil {
			l.log.Warn("selfimprove: tweak not applied", "agent", a.id, "error", err)
		} else {
			ev = a.queueLocked(l.newEvent(EventImprovementApplied, a.id, ch))
		}
	}
	a.mu.Unlock()
	// Save the change, or at least the cooldown, so that a restart does
	// not run the strategy again at once.
	perr := l.persist(a)
	if ch == nil {
		return nil, errors.Join(err, perr)
	}
	if perr != nil {
		// A change that cannot be recorded is not made.
		a.mu.Lock()
		a.pending = slices.DeleteFunc(a.pending, func(q queued) bool { return q.ev == ev })
		if v := a.s.Verifying; v != nil && v.ID == ch.ID {
			s := &a.s
			s.endVerify()
			a.installLocked(l, ch.From.clone())
			s.History = s.History[:len(s.History)-1]
		}
		a.mu.Unlock()
		return nil, fmt.Errorf("selfimprove: change not applied: %w", perr)
	}
	l.m.improvements.Add(1)
	l.rememberFix(ch, FixVerifying, ch.AppliedAt)
	return ch, nil
}

// repeats reports whether moving from cur to next repeats the rolled-back
// tweak rb: every field next changes (Timeout, MaxAttempts, Backoff, Route,
// Params) takes rb's value. A strategy that proposes the same route on top
// of a config that has changed since is so refused all the same.
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
		check(!maps.Equal(next.Params, cur.Params), maps.Equal(next.Params, rb.Params)) && moved
}

// analysisMemories is how many memories an Analysis carries.
const analysisMemories = 5

// largest returns the cluster with the most failures in the window.
func largest(cs []Cluster) *Cluster {
	var top *Cluster
	for i := range cs {
		if top == nil || cs[i].Count > top.Count {
			top = &cs[i]
		}
	}
	return top
}

// rememberFix records ch, in state, in the failure memory of its cluster.
func (l *Loop) rememberFix(ch *Change, state FixOutcome, at time.Time) {
	if ch.Cluster == "" {
		return
	}
	l.mem.addFix(ch.Cluster, Fix{AgentID: ch.AgentID, ChangeID: ch.ID, ProposalID: ch.ProposalID,
		From: ch.From.clone(), To: ch.To.clone(), Reason: ch.Reason, State: state, Time: at})
}

// callStrategy calls the strategy in its own goroutine, so that a strategy
// that ignores its context delays nobody beyond the deadline.
func (l *Loop) callStrategy(ctx context.Context, an *Analysis) (*Tweak, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.strategyTimeout)
	defer cancel()
	type result struct {
		tw  *Tweak
		err error
	}
	res := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				l.m.strategyPanics.Add(1)
				res <- result{nil, fmt.Errorf("%w: %v", ErrStrategyPanic, r)}
			}
		}()
		tw, err := l.strategy.Analyze(sctx, *an)
		res <- result{tw, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("selfimprove: strategy: %w", r.err)
		}
		return r.tw, nil
	case <-sctx.Done():
		l.m.strategyTimeouts.Add(1)
		return nil, fmt.Errorf("%w after %v", ErrStrategyTimeout, l.strategyTimeout)
	}
}

// applyLocked installs tw as a's next config version and starts verifying
// it.
func (l *Loop) applyLocked(a *agent, an *Analysis, tw *Tweak, now time.Time) (*Change, error) {
	s := &a.s
	cfg := tw.Config.clone()
	reject := func(format string, args ...any) (*Change, error) {
		l.m.rejectedTweaks.Add(1)
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrTweakRejected}, args...)...)
	}
	switch {
	case s.Config.Version != an.Config.Version || s.Verifying != nil:
		return nil, ErrStale
	case cfg.validate() != nil:
		return reject("%v", cfg.validate())
	case cfg.Equal(s.Config):
		return reject("it is the current config")
	}
	for _, r := range s.Rejected {
		if cfg.Equal(r.Config) || repeats(s.Config, cfg, r.Config) {
			return reject("it repeats a tweak rolled back before (version %d: %s)", r.Config.Version, r.Reason)
		}
	}
	s.MaxVersion++
	cfg.Version = s.MaxVersion
	n := now.UnixNano()
	win := s.Tracker.stats(n)
	win.Profile, win.Window = an.Stats.Profile, an.Stats.Window
	before := win
	if !l.pol.SeedCompatible {
		before = s.Tracker.regime(s.Tracker.faultStart(n-int64(win.Window)), l.pol.BeforeCalls)
	}
	ch := &Change{
		ID:        newID(now),
		AgentID:   a.id,
		From:      s.Config,
		To:        cfg,
		Reason:    tw.Reason,
		Before:    before,
		Window:    &win,
		Cluster:   tw.Cluster,
		AppliedAt: now.UTC(),
		State:     ChangeVerifying,
	}
	if ch.Cluster == "" {
		if top := largest(an.Clusters); top != nil {
			ch.Cluster = top.ID
		}
	}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	v := *ch
	s.endVerify()
	s.Verifying = &v
	a.installLocked(l, cfg)
	return ch, nil
}

// persist saves a's state, then appends the queued events to the log in
// decision order and hands them to the notifier. Saves of one agent are
// serialised, and each takes the state and the queue as they are when it
// begins, so a newer state is never overwritten by an older one and the
// log follows the order of decisions. Events that could not be logged go
// back to the head of the queue for the next save.
func (l *Loop) persist(a *agent) error {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	if a.evicted {
		// Saved when it was evicted; its successor owns the state now.
		a.mu.Unlock()
		return nil
	}
	snap := a.snapshotLocked()
	evs := a.pending
	a.pending = nil
	a.dirty = false
	a.mu.Unlock()

	err := l.saveState(a.id, &snap)
	if err == nil && len(evs) > 0 {
		events := make([]Event, len(evs))
		for i, q := range evs {
			events[i] = *q.ev
		}
		if err = l.store.AppendEvents(events); err != nil {
			l.log.Error("selfimprove: cannot record events", "agent", a.id, "count", len(evs), "error", err)
		}
	}
	if err != nil {
		l.m.storeErrors.Add(1)
		a.mu.Lock()
		a.dirty = true
		a.pending = append(evs[:len(evs):len(evs)], a.pending...)
		a.mu.Unlock()
		return err
	}
	for _, q := range evs {
		if !q.notified {
			l.notify(q.ev)
		}
	}
	return nil
}

// snapshotLocked copies a's state for saving; a.mu is held.
func (a *agent) snapshotLocked() agentState {
	snap := a.s
	snap.History = slices.Clone(snap.History)
	snap.Changes = slices.Clone(snap.Changes)
	snap.Rejected = slices.Clone(snap.Rejected)
	snap.Clusters = slices.Clone(snap.Clusters)
	snap.Proposals = slices.Clone(snap.Proposals)
	if snap.Verifying != nil {
		v := *snap.Verifying
		snap.Verifying = &v
	}
	return snap
}

// saveState encodes and saves the state of agent id.
func (l *Loop) saveState(id string, st *agentState) error {
	data, err := json.Marshal(st)
	if err == nil {
		err = l.store.SaveAgent(id, data)
	}
	if err != nil {
		l.log.Error("selfimprove: cannot save agent state", "agent", id, "error", err)
	}
	return err
}

// evictIdle saves and evicts the least recently used agents until at most
// 90% of maxAgents remain (or none can go).
func (l *Loop) evictIdle() {
	type use struct {
		a    *agent
		last int64
	}
	var all []use
	l.agents.Range(func(_, v any) bool {
		a := v.(*agent)
		a.mu.Lock()
		all = append(all, use{a, a.lastUsed})
		a.mu.Unlock()
		return true
	})
	excess := len(all) - l.maxAgents*9/10
	if excess <= 0 {
		return
	}
	slices.SortFunc(all, func(x, y use) int { return cmp.Compare(x.last, y.last) })
	for _, u := range all {
		if excess == 0 {
			break
		}
		if l.evict(u.a) {
			excess--
		}
	}
}

// evict saves a and removes it from memory, unless it is busy (analysing,
// or with events not yet logged) or cannot be saved. A call that still
// holds a finds it evicted and moves to a fresh agent loaded from the
// store.
func (l *Loop) evict(a *agent) bool {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	if a.evicted || a.analyzing || len(a.pending) > 0 {
		a.mu.Unlock()
		return false
	}
	snap := a.snapshotLocked()
	a.evicted = true
	a.mu.Unlock()
	if err := l.saveState(a.id, &snap); err != nil {
		l.m.storeErrors.Add(1)
		a.mu.Lock()
		a.evicted = false
		a.mu.Unlock()
		return false
	}
	l.agents.CompareAndDelete(a.id, a)
	l.m.agents.Add(-1)
	l.m.evictions.Add(1)
	return true
}

// flushLoop saves the agents that ran, every interval, until Close.
func (l *Loop) flushLoop(interval time.Duration) {
	defer close(l.flushDone)
	if interval <= 0 {
		for {
			select {
			case <-l.sweep:
				l.evictIdle()
			case <-l.stopFlush:
				return
			}
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush()
			if l.m.agents.Load() > int64(l.maxAgents) {
				l.evictIdle()
			}
		case <-l.sweep:
			l.evictIdle()
		case <-l.stopFlush:
			return
		}
	}
}

// flush saves the agents whose state changed since their last save.
func (l *Loop) flush() error {
	var errs []error
	l.agents.Range(func(_, v any) bool {
		a := v.(*agent)
		a.mu.Lock()
		dirty := a.dirty
		a.mu.Unlock()
		if dirty {
			if err := l.persist(a); err != nil {
				errs = append(errs, err)
			}
		}
		return true
	})
	errs = append(errs, l.saveMemory(l.isClosed.Load()))
	return errors.Join(errs...)
}

func (l *Loop) notify(ev *Event) {
	if l.disp != nil {
		l.disp.send(*ev)
	}
}

// newEvent makes an event about (a copy of) ch with a one-line message.
func (l *Loop) newEvent(t EventType, agentID string, ch *Change) *Event {
	now := l.clock.Now()
	c := *ch
	e := &Event{ID: newID(now), Time: now.UTC(), Type: t, AgentID: agentID, Change: &c}
	switch t {
	case EventImprovementApplied:
		e.Message = fmt.Sprintf("agent %q: applied config v%d (was v%d): %s", agentID, ch.To.Version, ch.From.Version, ch.Reason)
	case EventChangeConfirmed:
		e.Message = fmt.Sprintf("agent %q: confirmed config v%d: %s", agentID, ch.To.Version, ch.Verdict)
	case EventRolledBack:
		e.Message = fmt.Sprintf("agent %q: rolled back config v%d to v%d: %s", agentID, ch.To.Version, ch.From.Version, ch.Verdict)
	case EventRollbackFailed:
		e.Message = fmt.Sprintf("agent %q: rolled back config v%d to v%d in memory, but could not record it", agentID, ch.To.Version, ch.From.Version)
	case EventConfigSet:
		e.Message = fmt.Sprintf("agent %q: config set to v%d by operator", agentID, ch.To.Version)
	}
	return e
}

// newID returns a UUIDv7: 48 bits of Unix milliseconds, then random bits.
// IDs are unique across processes and sort by time.
func newID(t time.Time) string {
	var b [16]byte
	crand.Read(b[6:])
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Config returns a copy of agentID's current config (the default config
// for an agent the loop has not seen, or whose state cannot be read).
func (l *Loop) Config(agentID string) Config {
	a, _ := l.agent(agentID)
	if a == nil {
		return l.defaultConfig.clone()
	}
	return a.cfg.Load().Config.clone()
}

// SetConfig sets agentID's baseline config, as an operator action. The
// config gets the agent's next version (cfg.Version is ignored); a change
// under verification is superseded. The new config and an EventConfigSet
// are saved before SetConfig returns.
func (l *Loop) SetConfig(agentID string, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	now := l.clock.Now()
	a, err := l.lockAgent(nil, agentID)
	if a == nil {
		return err
	}
	s := &a.s
	if s.Verifying != nil {
		l.decideLocked(a, now, ChangeSuperseded, "superseded by SetConfig")
	}
	cfg = cfg.clone()
	s.MaxVersion++
	cfg.Version = s.MaxVersion
	ch := &Change{
		ID: newID(now), AgentID: agentID, From: s.Config, To: cfg, Reason: "set by operator",
		Before: s.Tracker.stats(now.UnixNano()), AppliedAt: now.UTC(), DecidedAt: now.UTC(), State: ChangeConfirmed,
	}
	s.History = appendBounded(s.History, s.Config, maxHistory)
	a.installLocked(l, cfg)
	a.queueLocked(l.newEvent(EventConfigSet, agentID, ch))
	a.mu.Unlock()
	return l.persist(a)
}

// Stats returns agentID's stats over its analysis window.
func (l *Loop) Stats(agentID string) Stats {
	now := l.clock.Now().UnixNano()
	a, _ := l.lockAgent(nil, agentID)
	if a == nil {
		return Stats{SuccessRate: 1}
	}
	defer a.mu.Unlock()
	return l.statsLocked(a, now)
}

// Threshold returns the threshold in force for agentID and the profile it
// comes from.
func (l *Loop) Threshold(agentID string) (Threshold, Profile) {
	now := l.clock.Now().UnixNano()
	a, _ := l.lockAgent(nil, agentID)
	if a == nil {
		return thresholdFor(nil, false, 0)
	}
	defer a.mu.Unlock()
	return l.thresholdLocked(a, now)
}

// SetThreshold overrides agentID's profile with t; the zero Threshold
// removes the override. The setting is saved before SetThreshold returns.
func (l *Loop) SetThreshold(agentID string, t Threshold) error {
	if t != (Threshold{}) {
		if err := t.validate(); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("agent %q: threshold set to %d failures in %v, cooldown %v, by operator", agentID, t.Failures, t.Window, t.Cooldown)
	if t == (Threshold{}) {
		msg = fmt.Sprintf("agent %q: manual threshold removed by operator", agentID)
	}
	return l.update(agentID, EventThresholdSet, msg, func(s *agentState) {
		if t == (Threshold{}) {
			s.Manual = nil
		} else {
			s.Manual = &thresholdJSON{Failures: t.Failures, Window: jsonDuration(t.Window), Cooldown: jsonDuration(t.Cooldown)}
		}
	})
}

// MarkCritical marks agentID critical (or not). A critical agent gets the
// critical threshold unless SetThreshold overrides it. The mark is saved
// before MarkCritical returns.
func (l *Loop) MarkCritical(agentID string, critical bool) error {
	return l.update(agentID, EventCriticalSet, fmt.Sprintf("agent %q: marked critical=%v by operator", agentID, critical),
		func(s *agentState) { s.Critical = critical })
}

// ClearRejected forgets the tweaks rolled back for agentID, so that the
// strategy's proposals are no longer refused for matching them.
func (l *Loop) ClearRejected(agentID string) error {
	return l.update(agentID, EventRejectedCleared, fmt.Sprintf("agent %q: rejected tweaks cleared by operator", agentID),
		func(s *agentState) { s.Rejected = nil })
}

// Changes returns agentID's recent changes, oldest first: up to 16 decided
// ones, then the one under verification, if any.
func (l *Loop) Changes(agentID string) []Change {
	a, _ := l.lockAgent(nil, agentID)
	if a == nil {
		return nil
	}
	defer a.mu.Unlock()
	out := slices.Clone(a.s.Changes)
	if a.s.Verifying != nil {
		out = append(out, a.s.verifyingLocked())
	}
	return out
}

// update applies an operator setting to agentID's state, and saves it with
// an event of type t.
func (l *Loop) update(agentID string, t EventType, msg string, f func(*agentState)) error {
	a, err := l.lockAgent(nil, agentID)
	if a == nil {
		return err
	}
	f(&a.s)
	now := l.clock.Now()
	l.thresholdLocked(a, now.UnixNano()) // resize the window at once
	a.queueLocked(&Event{ID: newID(now), Time: now.UTC(), Type: t, AgentID: agentID, Message: msg})
	a.mu.Unlock()
	return l.persist(a)
}
