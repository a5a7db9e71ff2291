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
// safe tweak is left. A Notifier delivers events (package notify has
// Slack, Telegram and webhook senders), with retries, digests of bursts
// and a daily summary.
//
// The wrapped call comes first: the loop never changes its result, never
// hides its error, and never lets the loop's own machinery (storage,
// strategy, notifier, panics in them) fail it or block it beyond a bounded
// time. Such failures are logged, counted in Metrics and returned in
// Report.LoopErr.
package selfimprove

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Report says what one ExecuteWithImprovement call did.
//
// Its fields are laid out so that its size stays a multiple of 16 bytes
// (see TestReportSize).
type Report struct {
	// Success reports whether fn finally returned nil.
	Success bool
	// Ignored reports that the call was not counted because the caller's
	// own context ended (cancelled or past its deadline) before fn
	// succeeded: that is the caller's choice, not the agent's failure.
	Ignored bool
	// ImprovementTriggered reports that this call's failure crossed the
	// agent's threshold and the strategy ran (or, with no strategy, would
	// have run).
	ImprovementTriggered bool
	// BudgetExhausted reports that retries stopped because the call's
	// Budget was spent, or, with Attempts 0, that the call was refused
	// before its first attempt (see Budget).
	BudgetExhausted bool
	// Arm is the arm of a canary verification (MethodCanary) the call ran
	// in: ArmChange under the change being verified, ArmControl under the
	// config before it. It is ArmNone when no canary verification was
	// under way. The call is credited to its arm's version.
	Arm Arm
	// Err is fn's final error, unchanged (nil on success).
	Err error
	// Duration is the whole call: every attempt and the waits between.
	Duration time.Duration
	// Attempts is how many times fn ran: 0 for a call refused by an open
	// circuit or a spent Budget.
	Attempts int
	// ConfigVersion is the version of the config fn ran under.
	ConfigVersion int
	// Version is the version of the agent's config in force when the call
	// returned: the new one when this call applied a change (Improvement)
	// or rolled one back (Rollback), else the version in force when it
	// began, which is ConfigVersion except on a canary's control arm.
	Version int
	// Improvement is the change applied during this call, else nil. It is
	// also nil when the caller's context ended while the strategy was
	// still running; the change then lands later, with its event.
	Improvement *Change
	// Rollback is the change rolled back during this call, else nil.
	Rollback *Change
	// Confirmed is the change whose verification passed during this call,
	// else nil.
	Confirmed *Change
	// ID names the call for Loop.Score (CallID is its text form): its
	// config version and the millisecond it ended. Two calls that end in
	// the same millisecond under the same version share it, and a score
	// of either counts for that version alike. 0 for an untracked call.
	ID uint64
	// LoopErr is an error of the loop's own machinery during this call
	// (storage, strategy), never fn's. The call's result stands regardless.
	LoopErr error
	// Cost is the cost the call reported with AddCost, over its attempts;
	// 0 when it reported none (or its Loop gave it no slot yet: see
	// AddCost). Record books it for a call that ran elsewhere.
	Cost float64
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
	// FleetErrors counts the fleet's failed operations (WithFleet);
	// FleetConflicts, the decisions another replica took first.
	FleetErrors, FleetConflicts int64
	// FleetReplica is this Loop's name in the fleet ("" without one).
	// FleetDown is 1 while the fleet cannot be reached (the replica
	// backs off), else 0; FleetOutages counts the outages (see
	// EventFleetUnreachable).
	FleetReplica            string
	FleetDown, FleetOutages int64
	// FleetCommits counts the decisions committed to the fleet (won or
	// lost), FleetCommitNS the nanoseconds they took in all, and
	// FleetCommitMaxNS the slowest.
	FleetCommits, FleetCommitNS, FleetCommitMaxNS int64
	// FleetLeases counts the leases a strategy run took, FleetLeasesBusy
	// those another replica held, FleetLeaseErrors those that failed.
	FleetLeases, FleetLeasesBusy, FleetLeaseErrors int64
	// FleetLag is the most revisions one agent's copy was behind the
	// fleet's at the latest flush (a commit announced late or lost; 0 in
	// step); FleetBehind counts the times a flush found a copy behind.
	FleetLag, FleetBehind int64
	// FleetReplicas is how many replicas of the fleet are seen alive,
	// this one among them (see Loop.FleetReplicas; 0 without a fleet).
	FleetReplicas int64
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
	fleetErrors, fleetConflicts            atomic.Int64
	fleetOutages, fleetCommits             atomic.Int64
	fleetCommitNS, fleetCommitMax          atomic.Int64
	fleetLeases, fleetBusy, fleetLeaseErrs atomic.Int64
	fleetLag, fleetBehind                  atomic.Int64
}

// Loop is the self-improvement loop. It is safe for concurrent use. Create
// it with New and release it with Close.
//
// The Loop is the edge around the per-agent state machine (state.go): it
// finds agents (registry.go), runs calls (call.go) and strategies
// (analysis.go), and carries out the effects of transitions: saving,
// logging, notifying, remembering (persist.go).
type Loop struct {
	// Read by every call.
	clock     Clock
	realTime  bool                              // clock is the default real clock
	mono      monoClock                         // the calls' readings with the default clock
	frontAt   [frontSlots]atEntry               // see Loop.agent
	front     [frontSlots]atomic.Pointer[agent] // see Loop.agent
	memo      *failure.Memo                     // what recent error texts scrub, classify and sign to
	coarse    *coarseClock                      // the clock, with WithCoarseClock
	isClosed  atomic.Bool                       // Close has begun
	traces    *traceWriter
	breaker   CircuitBreaker // off when Failures is 0
	agents    sync.Map       // agent ID → *agent
	rules     ruleBook       // what transitions are given: the policies
	canaryCut uint64         // MethodCanary: a call runs the control arm when its hash is below; 0 otherwise

	strategy        Strategy
	mem             *memory
	memLoaded       atomic.Bool // the saved memory was read (or there was none)
	log             *slog.Logger
	store           Store
	disp            *dispatcher // nil when notifications are off
	maxAgents       int
	ring            evictRing // live agents, for eviction
	defaultConfig   Config
	strategyTimeout time.Duration
	retryRules      retryRules    // WithRetryPolicy, with its defaults
	jitterSeed      uint64        // RetryPolicy.JitterSeed; 0: random jitter
	jitterN         atomic.Uint64 // draws of the seeded jitter

	shared   shared         // failures by cluster and class across agents
	lately   recentFailures // the latest failures nested in no attempt context
	circuits openCircuits   // the agents whose circuit is open, by cause
	routes   routeBook      // the agents' route ladders
	cands    candidateBook  // the agents' candidate configs
	dead     deadBook       // routes found dead
	causes   causeBook      // account-wide causes in force
	props    proposalIndex  // where proposals are
	seed     maphash.Seed
	createMu [32]sync.Mutex // serialises loading of the agents that hash to it
	mistakes mistakeLog     // calls with a bad ID or after Close, logged

	m   *metrics
	hub *hub // recent events and subscriptions (events.go)

	fleet *fleetLink // nil without WithFleet

	// slots is set once code asked to score or cost a call of this loop
	// from inside it and found no slot (see Loop.AddScore): from then on
	// every tracked call carries one.
	slots atomic.Bool

	// wmu admits writes to the store (read-locked around each) until
	// Close seals the loop (write-locked).
	wmu    sync.RWMutex
	sealed bool

	bgMu        sync.Mutex // guards closed and bg.Add
	closed      bool
	bg          sync.WaitGroup // analyses in flight
	stopFlush   chan struct{}
	flushDone   chan struct{}
	summaryDone chan struct{} // nil without WithDailySummary
	closeOnce   sync.Once
	closeErr    error
}

// New opens (creating it if needed) the state directory and returns a
// Loop. Agents are loaded lazily, on their first call. It fails with an
// error wrapping ErrInvalidOption, naming the option, when an option is
// outside its documented range.
func New(opts ...Option) (*Loop, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.defaultConfig.Version = 1
	probes := o.probes.withDefaults()
	var coarse *coarseClock
	if o.coarse > 0 {
		coarse = newCoarseClock(o.coarse)
		o.clock = coarse
	}
	m := new(metrics)
	st, err := openStore(&o, m)
	if err != nil {
		return nil, err
	}
	l := &Loop{
		clock:           o.clock,
		realTime:        o.clock == Clock(realClock{}),
		mono:            newMonoClock(time.Now()),
		coarse:          coarse,
		strategy:        o.strategy,
		rules:           ruleBook{policy: o.policy.withDefaults(), probes: probes, breaker: o.breaker, newID: newID},
		mem:             newMemory(o.memory),
		breaker:         o.breaker,
		log:             o.logger,
		store:           st,
		defaultConfig:   o.defaultConfig,
		strategyTimeout: o.strategyTimeout,
		retryRules:      o.retry.rules(),
		jitterSeed:      o.retry.JitterSeed,
		seed:            maphash.MakeSeed(),
		memo:            failure.NewMemo(),
		m:               m,
		hub:             newHub(o.recentEvents),
		maxAgents:       o.maxAgents,
		stopFlush:       make(chan struct{}),
		flushDone:       make(chan struct{}),
	}
	l.rules.dead, l.rules.routes = &l.dead, &l.routes
	l.routes.def = o.routes
	l.rules.cands, l.cands.def, l.rules.explore = &l.cands, o.candidates, o.exploration.withDefaults()
	if pol := l.rules.policy; pol.Method == MethodCanary {
		l.canaryCut = uint64(math.Ldexp(pol.CanaryFraction, 64))
	}
	l.restore(o.recentEvents)
	l.slotsFollow()
	l.start(&o)
	return l, nil
}

// openStore returns the store of WithStore, or opens the FileStore of
// WithDir (DefaultDir without it), its errors counted in m.
func openStore(o *options, m *metrics) (Store, error) {
	if o.store != nil {
		return o.store, nil
	}
	if o.dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		o.dir = d
		o.logger.Info("selfimprove: keeping state in "+d+" (WithDir chooses where; WithStore(NewRAMStore()) keeps it in memory)", "dir", d)
	}
	o.fileOpts.Clock, o.fileOpts.Logger = o.clock, o.logger
	o.fileOpts.OnError = func(error) { m.storeErrors.Add(1) }
	o.fileOpts.MaxMemorySize = max(o.fileOpts.MaxMemorySize, int64(o.memory.MaxClusters)*memoryFileBytesPerCluster)
	fs, err := OpenFileStore(o.dir, o.fileOpts)
	if err != nil {
		return nil, err
	}
	return fs, nil
}

// restore reads back what the store kept of the loop: the failure memory
// and up to recent of the newest events. Neither failure is fatal.
func (l *Loop) restore(recent int) {
	if err := l.loadMemory(); err != nil {
		// Not fatal: the memory is not saved until it has been read, so
		// the saved one is never overwritten; flushes retry the read.
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot read the failure memory; will retry", "error", err)
	}
	if h, ok := l.store.(eventHistory); ok && recent > 0 {
		// Loop.Events and a resumed stream reach back past a restart.
		evs, err := h.RecentEvents(recent)
		if err != nil {
			l.m.storeErrors.Add(1)
			l.log.Error("selfimprove: cannot read the recent events", "error", err)
		}
		for i := range evs {
			l.hub.publish(&evs[i])
		}
	}
}

// start links the loop to its fleet, trace writer and notifier, and
// starts its background goroutines: the flusher, the fleet's, and the
// daily summary's.
func (l *Loop) start(o *options) {
	if o.fleet != nil {
		l.fleet = newFleetLink(o)
	}
	if o.traceMode != TracesOff {
		l.traces = newTraceWriter(l.store, o.logger, l.m, o.traceMode, o.traceQueue, o.traceWait)
	}
	ns := o.notifiers
	if !o.notifierSet {
		ns = []Notifier{logNotifier{o.logger}}
	}
	if len(ns) > 0 {
		l.disp = newDispatcher(ns, o.logger, o.notify, l.m)
	}
	go l.flushLoop(o.flushInterval)
	if l.fleet != nil {
		l.startFleet()
	}
	if o.summaryOn && l.disp != nil {
		l.summaryDone = make(chan struct{})
		go l.summaryLoop(o.summaryAt)
	}
}

// Close stops the loop and is a barrier: after it returns, this Loop
// writes nothing to its store or directory, ever. It waits for strategies
// in flight (each bounded by the strategy timeout), writes the pending
// traces, waits for the saves under way (each bounded by the store), saves
// every agent with unsaved changes, delivers the queued events (for at
// most the notify timeout) and closes the store, which releases the
// directory. It returns the errors it met.
//
// A call in flight when Close begins keeps its result; its bookkeeping is
// saved if it reaches the store before Close seals it, and is otherwise
// dropped, with ErrClosed in its Report.LoopErr. Calls made after Close
// still run fn, untracked, with Report.LoopErr ErrClosed; every other
// method that writes returns ErrClosed. Close is idempotent.
func (l *Loop) Close() error {
	l.closeOnce.Do(func() {
		l.bgMu.Lock()
		l.closed = true
		l.bgMu.Unlock()
		l.isClosed.Store(true)
		l.bg.Wait()
		var fleetErr error
		if l.fleet != nil {
			fleetErr = l.closeFleet()
		}
		close(l.stopFlush)
		<-l.flushDone
		if l.summaryDone != nil {
			<-l.summaryDone
		}
		if l.traces != nil {
			l.traces.close()
		}
		// Seal: wait for the writes admitted so far, admit no more.
		l.wmu.Lock()
		l.sealed = true
		errs := []error{fleetErr, l.flushAdmitted()}
		l.wmu.Unlock()
		if l.disp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.disp.timeout)
			errs = append(errs, l.disp.close(ctx))
			cancel()
		}
		errs = append(errs, l.store.Close())
		l.hub.close()
		if l.coarse != nil {
			l.coarse.close()
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// Metrics returns the loop's counters.
func (l *Loop) Metrics() Metrics {
	m := l.m
	out := Metrics{
		Improvements: m.improvements.Load(), Confirmations: m.confirmations.Load(), Rollbacks: m.rollbacks.Load(),
		StrategyRuns: m.strategyRuns.Load(), StrategyErrors: m.strategyErrors.Load(),
		StrategyPanics: m.strategyPanics.Load(), StrategyTimeouts: m.strategyTimeouts.Load(),
		StoreErrors: m.storeErrors.Load(),
		Notified:    m.notified.Load(), NotifyErrors: m.notifyErrors.Load(), NotifyPanics: m.notifyPanics.Load(),
		NotifyDropped: m.notifyDropped.Load(), RejectedTweaks: m.rejectedTweaks.Load(),
		Traces: m.traces.Load(), TracesDropped: m.tracesDropped.Load(),
		Agents: m.agents.Load(), Loads: m.loads.Load(), Evictions: m.evictions.Load(),
		FleetErrors: m.fleetErrors.Load(), FleetConflicts: m.fleetConflicts.Load(),
		FleetOutages: m.fleetOutages.Load(), FleetCommits: m.fleetCommits.Load(), FleetCommitNS: m.fleetCommitNS.Load(),
		FleetCommitMaxNS: m.fleetCommitMax.Load(), FleetLeases: m.fleetLeases.Load(), FleetLeasesBusy: m.fleetBusy.Load(),
		FleetLeaseErrors: m.fleetLeaseErrs.Load(), FleetLag: m.fleetLag.Load(), FleetBehind: m.fleetBehind.Load(),
	}
	if l.fleet != nil {
		out.FleetReplica = l.fleet.replica
		out.FleetReplicas = l.fleet.fleetReplicas(l.clock.Now())
		if l.fleet.Down() {
			out.FleetDown = 1
		}
	}
	return out
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
