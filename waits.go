package selfimprove

import (
	"time"

	"github.com/self-improving-loop/selfimprove/internal/replica"
)

// waits is the time a call, or an operator's method, may spend on the
// replication of its agent's state, all of it together: the load of a
// new agent, a probe's claim, its decision's save and commit, its counts
// under verification, an analysis's lease (docs/fleet.md, "When the fleet cannot be reached").
// The call path carries it without opening it: only the driver and the
// replication do (callWait, fleetLink), so that the call's types hold no
// handle of the fleet. Its zero value has not waited yet; without a
// fleet it stays so. A call's is paused while fn runs: that time is fn's
// (Loop.finish).
type waits struct{ c *replica.Chain }

// pause stops w's clock, if it has started.
func (w *waits) pause() {
	if w.c != nil {
		w.c.Pause()
	}
}

// resume restarts w's clock, if it has started.
func (w *waits) resume() {
	if w.c != nil {
		w.c.Resume()
	}
}

// exclude takes d, spent on what has a timeout of its own (a strategy's
// run), out of w's time, if its clock has started.
func (w *waits) exclude(d time.Duration) {
	if w.c != nil {
		w.c.Exclude(d)
	}
}
