package selfimprove

import "time"

// The defaults that a zero option field takes, for a program that wants
// to name them.
const (
	// DefaultMemoryClusters is MemoryOptions.MaxClusters's default;
	// DefaultMemoryHalfLife, MemoryOptions.HalfLife's.
	DefaultMemoryClusters = 10000
	DefaultMemoryHalfLife = 7 * 24 * time.Hour
	// DefaultFleetTimeout is WithFleetTimeout's default;
	// DefaultFleetInterval and DefaultFleetCalls, WithFleetFlush's.
	DefaultFleetTimeout  = 500 * time.Millisecond
	DefaultFleetInterval = 200 * time.Millisecond
	DefaultFleetCalls    = 1024
	// The default policy values, the defaults of the RollbackPolicy fields
	// they are named after (DefaultVerifyCalls is MinCalls's,
	// DefaultSequentialMaxCalls is MaxCalls's). DefaultFalseRollbacks and
	// DefaultMissedRollbacks are MethodSequential's; QuickFalseRollbacks and
	// QuickMissedRollbacks are MethodQuick's.
	DefaultVerifyCalls            = 10
	DefaultMinBeforeCalls         = 10
	DefaultMaxSuccessDrop         = 10.0
	DefaultMaxLatencyRise         = 20.0
	DefaultMaxLatencyRiseOnGain   = 400.0
	DefaultMinLatencyRise         = time.Millisecond
	DefaultMaxConsecutiveFailures = 5
	DefaultFalseRollbacks         = 0.004
	DefaultMissedRollbacks        = 0.02
	QuickFalseRollbacks           = 0.05
	QuickMissedRollbacks          = 0.02
	DefaultSequentialMaxCalls     = 100
	DefaultCanaryFraction         = 0.1
	DefaultRefuseFor              = 24 * time.Hour
	DefaultBackstopCalls          = 60
	DefaultMaxCostRise            = 20.0
	DefaultQualityDrop            = 0.05
	DefaultQualityCooldown        = time.Hour
)

// The loop's fixed bounds and constants.
const (
	// MaxAgentIDLen is the longest agent ID the loop accepts, in bytes.
	// An ID is otherwise any string but the empty one: the loop never
	// uses it as a path or a key without mapping it to a safe name first.
	MaxAgentIDLen = 1024
	// MaxThresholdFailures is the largest Threshold.Failures the loop
	// accepts: it keeps the times of this many recent failures per agent,
	// which makes the trigger exact and O(1).
	MaxThresholdFailures = 64
	// MaxFleetFailures is how many failures a FleetDelta carries in
	// detail, and how many of a generation's latest failures a FleetPool
	// returns.
	MaxFleetFailures = 32
	// MaxFleetNotes is how many notes (Fleet.Note) a fleet keeps, and
	// how long a note's name may be, in bytes.
	MaxFleetNotes = 256
	// HealthHalfLife is the half-life of the health score, as a fraction
	// of the agent's analysis window: a call a quarter of the window old
	// weighs half as much as one made now.
	HealthHalfLife = 0.25
	// ScoreHorizon is how long after a call ended Loop.Score accepts a
	// score for it (see docs/quality.md).
	ScoreHorizon = time.Hour
	// MaxScoreKeys is how many keys of its latest scores by ID an agent
	// remembers (Loop.ScoreCall): a retried score counts once if no more
	// than MaxScoreKeys other scores of the agent by ID came in between.
	// The keys take 8 bytes each (1 KiB), held only by agents scored by
	// ID, and are kept in memory: a score retried after a restart, after
	// the agent was evicted from memory (WithMaxAgents), or at another
	// replica of a fleet counts again.
	MaxScoreKeys = 128
)

// maxRecordCost bounds a call's cost, recorded or added with AddCost (a
// call's sum of them stops there), and a fleet's pooled cost per call: a
// larger one, as a NaN or a negative one, is not booked.
const maxRecordCost = 1e12
