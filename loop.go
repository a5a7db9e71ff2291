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
// Every failure is scrubbed of secrets (failure.Scrub), classified
// (failure.Classify) and clustered by its signature (failure.Signature);
// the loop scores each agent's Health and spots SharedCauses across
// agents. The built-in strategy (BuiltinStrategy, what New uses without
// WithStrategy) applies the safe tweak for the dominant class of failure, and files a Proposal for a person to Approve or Reject when no
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
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

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
	noSlots   bool                              // WithCallScores(false): calls carry no score slot
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
	loading  sync.Map       // agent ID → *loading: the loads in flight (create)
	loadingN atomic.Int64   // how many
	mistakes mistakeLog     // calls with a bad ID or after Close, logged

	m   *metrics
	hub *hub // recent events and subscriptions (events.go)

	fleet *fleetLink // nil without WithFleet

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

	// limited: a ladder declared Limits, once, and calls look for their
	// Needs (see WithNeeds). Last: the fields the calls read stay where
	// they were.
	limited atomic.Bool
	keys    callKeys // the keys of call IDs
}
