package selfimprove

import (
	"time"
)

// CircuitBreaker makes an agent's calls fail fast once the loop has run
// out of ideas, as a task is abandoned when its breaker trips. It is off
// unless set with WithCircuitBreaker.
//
// Closed, it counts consecutive failures under the agent's current config.
// After Failures of them with no change under verification (the agent runs
// under the best config the loop has), the circuit opens: calls return
// ErrCircuitOpen at once, for CoolOff or CoolOffCalls of the agent's
// average intervals between calls, whichever is longer. Then it is half-open: one call, the probe, runs fn, and the
// others keep failing fast. A successful probe closes the circuit; a
// failed one opens it for another CoolOff. Calls that fail fast are not
// counted in Stats. Each transition is an event (EventCircuitOpened,
// EventCircuitClosed), and the open state survives a restart.
//
// The state is derived from timestamps when a call arrives: no goroutine
// or timer runs, and a closed circuit costs one atomic load a call.
type CircuitBreaker struct {
	// Failures is how many consecutive failures open the circuit.
	// Default 5; at most MaxThresholdFailures (64).
	Failures int
	// CoolOff is how long the circuit stays open before a probe, at the
	// least. Default 30 seconds; at most 24 hours.
	CoolOff time.Duration
	// CoolOffCalls scales the cool-off with the agent's call rate: the
	// circuit stays open for at least this many of the agent's average
	// intervals between calls (its calls over the last 24 hours, or
	// since its first call if later, to within 15 minutes), so that at
	// one call a minute not every call is a probe. The cool-off is at
	// most 24 hours. Default 10, at most 10,000; negative: CoolOff
	// alone.
	CoolOffCalls int
}

const (
	// maxCoolOff caps the cool-off scaled by CoolOffCalls, and bounds
	// CoolOff.
	maxCoolOff = 24 * time.Hour
	// maxCoolOffCalls bounds CoolOffCalls: so many intervals of a day
	// each do not overflow a Duration.
	maxCoolOffCalls = 10_000
)

// validate checks b's fields against their bounds; a negative
// CoolOffCalls turns the scaling off.
func (b CircuitBreaker) validate() error {
	return firstErr(
		inRange("Failures", b.Failures, 0, MaxThresholdFailures),
		inRange("CoolOff", b.CoolOff, 0, maxCoolOff),
		atMost("CoolOffCalls", b.CoolOffCalls, maxCoolOffCalls),
	)
}

// coolOff returns how long the circuit opens for, after calls calls over
// span: CoolOff, or CoolOffCalls average intervals between calls if
// longer (at most maxCoolOff).
func (b CircuitBreaker) coolOff(calls int, span time.Duration) time.Duration {
	n := b.CoolOffCalls
	if n == 0 {
		n = 10
	}
	if n < 0 || calls <= 0 || span <= 0 {
		return b.CoolOff
	}
	return max(b.CoolOff, min(time.Duration(n)*(span/time.Duration(calls)), maxCoolOff))
}

// trips reports whether consecutive failures under the current config
// open a closed circuit: Failures of them, with no change under
// verification (the agent then runs under the best config the loop has).
func (b CircuitBreaker) trips(consecutive int, verifying bool) bool {
	return b.Failures > 0 && !verifying && consecutive >= b.Failures
}

// admits reports whether a call at now (Unix ns) may run fn when the
// circuit is open until until (0: closed): a closed circuit admits every
// call; an open one admits none until until, then one probe (chosen by
// the caller).
func (b CircuitBreaker) admits(now, until int64) bool {
	return until == 0 || now >= until
}
