package selfimprove

import "time"

// The defaults that a zero option field takes, for a program that wants
// to name them. RollbackPolicy's are DefaultVerifyCalls and those
// declared with it, and DefaultBackstopCalls.
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
)
