package selfimprove

// A wall clock that steps back (an NTP step, a VM's clock set right) would
// keep a wait stored as a wall-clock time (an open circuit's end) going for
// the step's length on top of itself. The loop takes a reading more than
// steppedBack before the end of an agent's last call booked as such a step.

import "time"

// steppedBack is how far behind the end of the last call booked a reading
// of the clock must be for the loop to take the wall clock as stepped back
// (an NTP step, a VM's clock set right): well beyond a call that ends while
// another reads the clock, or the skew between replicas of a fleet (whose
// failures an agent books with their own clocks' times).
const steppedBack = int64(time.Minute)

// waitUntil returns until, when a wait that began at or before the last
// call booked ends (Unix ns; 0: none), as seen at now: now itself, when
// now is more than steppedBack behind that call's end. The wall clock
// stepped back since, and the wait is over as if its time had come: it
// would otherwise last as long as the step on top of itself.
func (t *tracker) waitUntil(until, now int64) int64 {
	last := t.CallEnd[(int(t.CallPos)+maxBeforeCalls-1)%maxBeforeCalls]
	if until <= now || now >= last-steppedBack {
		return until
	}
	return max(now, 1)
}

// openUntil is when the agent's open circuit lets a probe through, as
// seen at now (Unix ns; 0 when closed): CircuitOpenUntil, or now when the
// wall clock stepped back behind the last call booked (tracker.waitUntil):
// the next call probes, and the probe closes the circuit or opens it again
// for a full cool-off from the new time.
func (s *agentState) openUntil(now int64) int64 { return s.Tracker.waitUntil(s.CircuitOpenUntil, now) }
