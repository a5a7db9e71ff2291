package selfimprove

import (
	"fmt"
	"time"
)

// Threshold says when an agent's failures call for an improvement: when
// Failures failed calls have ended within the last Window (counting only
// calls that started after the agent's last config change), the loop runs
// its strategy, and then waits Cooldown before it runs it again.
//
// SetThreshold refuses, with an error wrapping ErrInvalidThreshold that
// names the field, a field outside its bound.
type Threshold struct {
	// Failures is from 1 to MaxThresholdFailures (64).
	Failures int
	// Window is positive and at most 366 days.
	Window time.Duration
	// Cooldown is from 0 to 366 days.
	Cooldown time.Duration
}

// maxWindow is the longest analysis window and cooldown a Threshold may
// have: 366 days.
const maxWindow = 366 * 24 * time.Hour

// validate checks t's fields against their bounds; the error wraps
// ErrInvalidThreshold and names the field.
func (t Threshold) validate() error {
	err := firstErr(
		inRange("threshold.failures", t.Failures, 1, MaxThresholdFailures),
		positive("threshold.window", t.Window),
		inRange("threshold.window", t.Window, 0, maxWindow),
		inRange("threshold.cooldown", t.Cooldown, 0, maxWindow),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidThreshold, err)
	}
	return nil
}

// Profile names the threshold an agent gets. Frequency profiles are chosen
// from the agent's calls in the last 24 hours; ProfileCritical is chosen by
// the user (MarkCritical), never guessed from the agent's name; and
// ProfileManual means SetThreshold overrides the table.
type Profile string

// The profiles.
const (
	ProfileHigh     Profile = "high"     // more than 100 calls a day
	ProfileMedium   Profile = "medium"   // 10 to 100 calls a day
	ProfileLow      Profile = "low"      // fewer than 10 calls a day
	ProfileCritical Profile = "critical" // marked by the user
	ProfileManual   Profile = "manual"   // threshold set by SetThreshold
)

// profiles is the threshold table. A frequency profile applies when the
// agent's calls in the last 24 hours are at least minPerDay; the first row
// that matches wins.
var profiles = [...]struct {
	profile   Profile
	minPerDay int
	threshold Threshold
}{
	{ProfileHigh, 101, Threshold{Failures: 5, Window: 48 * time.Hour, Cooldown: 3 * time.Hour}},
	{ProfileMedium, 10, Threshold{Failures: 3, Window: 24 * time.Hour, Cooldown: 6 * time.Hour}},
	{ProfileLow, 0, Threshold{Failures: 2, Window: 72 * time.Hour, Cooldown: 12 * time.Hour}},
}

// criticalThreshold applies to agents marked critical.
var criticalThreshold = Threshold{Failures: 1, Window: 24 * time.Hour, Cooldown: 6 * time.Hour}

// thresholdFor resolves the threshold in force: a manual threshold first,
// then the critical mark, then the frequency profile for callsPerDay.
func thresholdFor(manual *Threshold, critical bool, callsPerDay int) (Threshold, Profile) {
	if manual != nil {
		return *manual, ProfileManual
	}
	if critical {
		return criticalThreshold, ProfileCritical
	}
	for _, p := range profiles {
		if callsPerDay >= p.minPerDay {
			return p.threshold, p.profile
		}
	}
	panic("unreachable: the last profile matches every count")
}
