package selfimprove

// An outage leaves no scar on the agent's baseline: the failures of a run
// of at least longRun calls in a row (an upstream that stopped answering,
// for this agent alone or for many) are logged apart, and left out of the
// failure rate the quiet rule (agentState.abnormal) takes as the agent's
// usual noise. Otherwise an hour of failures would make a later fault of
// 20 % look like noise for as long as the outage stays in the window.

const (
	// longRun is how many failures in a row make an outage: more than
	// the 5-call flaps of the A/B table's "flapping 503s", which stay the
	// agent's usual failures.
	longRun = 10
	// maxOutages is how many outages an agent's log keeps: the oldest
	// goes first.
	maxOutages = 8
)

// outage is one run of at least longRun failures in a row: when its
// latest failure ended (Unix ns) and how many failures it holds.
type outage struct {
	End      int64  `json:"e"`
	Failures uint32 `json:"n"`
}

// outageLog is an agent's latest outages, the first N of Runs, oldest
// first.
type outageLog struct {
	Runs [maxOutages]outage `json:"runs"`
	N    uint8              `json:"n"`
}

// noteRun logs the failure that ended at end as part of an outage, once
// the run it extends (t.Consec failures in a row, this one included) is
// longRun long: the run's first failure opens an entry with all of them.
func (t *tracker) noteRun(end int64) {
	if t.Consec < longRun {
		return
	}
	if t.Outages == nil {
		t.Outages = new(outageLog)
	}
	o := t.Outages
	if t.Consec == longRun || o.N == 0 {
		if o.N == maxOutages {
			copy(o.Runs[:], o.Runs[1:])
			o.N--
		}
		o.Runs[o.N] = outage{End: end, Failures: uint32(min(t.Consec, 1<<31))}
		o.N++
		return
	}
	r := &o.Runs[o.N-1]
	r.End = end
	if r.Failures < ^uint32(0) {
		r.Failures++
	}
}

// outageFailures counts the failures of the logged outages whose latest
// failure ended in [from, to).
func (t *tracker) outageFailures(from, to int64) int {
	if t.Outages == nil {
		return 0
	}
	n := 0
	for _, r := range t.Outages.Runs[:t.Outages.N] {
		if r.End >= from && r.End < to {
			n += int(r.Failures)
		}
	}
	return n
}

// outages returns the logged outages, oldest first.
func (t *tracker) outages() []outage {
	if t.Outages == nil {
		return nil
	}
	return t.Outages.Runs[:t.Outages.N]
}

// baseline returns the calls and failures the quiet rule takes as the
// agent's usual ones at now, outages left out: those of the older half of
// the analysis window, or of the whole window when the older half holds
// fewer than baselineCalls of them (whole is then true).
func (t *tracker) baseline(now int64) (calls, failures int, whole bool) {
	w := &t.Win
	calls, failures = w.older(now)
	from := (w.Head - windowSlots + 1) * w.Width
	n := min(t.outageFailures(from, (w.Head-windowSlots/2+1)*w.Width), failures)
	if calls, failures = calls-n, failures-n; calls >= baselineCalls {
		return calls, failures, false
	}
	calls, failures, _ = w.sum(now)
	n = min(t.outageFailures(from, (w.Head+1)*w.Width), failures)
	return calls - n, failures - n, true
}

// Quiet healthy agents: under a frequency profile, once the older half of
// the analysis window holds baselineCalls calls (or else the whole window
// three times as many), the threshold's failures call for an analysis
// only if the recent calls fail abnormally often for the agent: at least
// as many failures among its last maxBeforeCalls calls as that baseline's
// failure rate gives in fewer than noiseOdds of cases. The baseline
// leaves outages out (see outages.go).
const (
	baselineCalls = 30
	noiseOdds     = 0.01
)
