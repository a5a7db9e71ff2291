package selfimprove

import (
	"math"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// newStats derives rates from counts.
func newStats(calls, failures int, latency time.Duration) Stats {
	s := Stats{Calls: calls, Failures: failures, TotalLatency: latency, SuccessRate: 1}
	if calls > 0 {
		s.SuccessRate = float64(calls-failures) / float64(calls)
		s.AvgLatency = latency / time.Duration(calls)
	}
	return s
}

// Failure is one failed call, as kept for analysis.
type Failure struct {
	// Time is when the call ended, Duration how long it took.
	Time     time.Time
	Duration time.Duration
	// Err is the error text, cut to failure.MaxText bytes.
	Err string
	// Version is the config version the call ran under.
	Version int
	// Class and Cluster are the failure's class and cluster ID; empty when
	// its cluster is no longer kept.
	Class   failure.Class
	Cluster string
}

const (
	windowSlots = 64                   // buckets of the analysis window
	daySlots    = 96                   // buckets of the 24-hour call counter
	daySlot     = 15 * time.Minute     // width of one day bucket
	failRing    = MaxThresholdFailures // failures kept for the trigger
	recentRing  = 16                   // failures kept with their text for Analysis
	minSlot     = int64(time.Second)   // narrowest analysis bucket
	maxSlot     = int64(maxWindow) / windowSlots
)

// slot holds the counts of one time bucket.
type slot struct {
	Calls    uint32 `json:"c,omitempty"`
	Failures uint32 `json:"f,omitempty"`
	Latency  int64  `json:"l,omitempty"` // nanoseconds
}

// window counts calls in windowSlots buckets of Width nanoseconds; Head is
// the index (time/Width) of the newest bucket. Bucket i lives at
// Slots[i%windowSlots].
type window struct {
	Width int64             `json:"width_ns"`
	Head  int64             `json:"head"`
	Slots [windowSlots]slot `json:"slots"`
}

// slotWidth is the bucket width for an analysis window of span.
func slotWidth(span time.Duration) int64 {
	return max(int64(span)/windowSlots, minSlot)
}

// advanceRing moves a ring's head (the index of its newest bucket; bucket i
// lives at slots[i%len(slots)]) forward to idx, clearing the buckets it
// passes.
func advanceRing[T any](slots []T, head *int64, idx int64) {
	if idx <= *head {
		return
	}
	n := int64(len(slots))
	if gap := idx - *head; gap >= n || gap < 0 { // gap < 0: overflow
		clear(slots)
	} else {
		var zero T
		for i := *head + 1; i <= idx; i++ {
			slots[i%n] = zero
		}
	}
	*head = idx
}

// advance moves Head to idx, clearing the buckets it passes.
func (w *window) advance(idx int64) {
	if idx > w.Head {
		advanceRing(w.Slots[:], &w.Head, idx)
	}
}

// at returns the bucket for time t (Unix nanoseconds); a time older than the
// window (a clock stepped back) lands in the newest bucket. Times before
// 1970 count as 1970.
func (w *window) at(t int64) *slot {
	idx := max(t, 0) / w.Width
	w.advance(idx)
	if idx <= w.Head-windowSlots {
		idx = w.Head
	}
	return &w.Slots[idx%windowSlots]
}

// sum adds up the buckets that are within the window at time now.
func (w *window) sum(now int64) (calls, failures int, latency time.Duration) {
	w.advance(now / w.Width)
	for _, s := range w.Slots {
		calls += int(s.Calls)
		failures += int(s.Failures)
		latency += time.Duration(s.Latency)
	}
	return calls, failures, latency
}

// older adds up the calls and failures of the older half of the window at
// time now.
func (w *window) older(now int64) (calls, failures int) {
	w.advance(now / w.Width)
	for i := int64(windowSlots / 2); i < windowSlots; i++ {
		if idx := w.Head - i; idx >= 0 {
			s := w.Slots[idx%windowSlots]
			calls += int(s.Calls)
			failures += int(s.Failures)
		}
	}
	return calls, failures
}

// resize changes the bucket width, moving each bucket's counts into the new
// bucket that holds its start time. Counts that fall outside the new window
// are dropped.
func (w *window) resize(width int64) {
	if width == w.Width {
		return
	}
	old := *w
	*w = window{Width: width, Head: old.Head * old.Width / width}
	for i := int64(0); i < windowSlots && old.Head-i >= 0; i++ {
		idx := old.Head - i
		s := old.Slots[idx%windowSlots]
		if s == (slot{}) {
			continue
		}
		ni := idx * old.Width / width
		if ni <= w.Head-windowSlots || ni < 0 {
			continue
		}
		d := &w.Slots[ni%windowSlots]
		d.Calls += s.Calls
		d.Failures += s.Failures
		d.Latency += s.Latency
	}
}

// dayCounter counts calls in daySlots buckets of daySlot each. A bucket
// saturates at 65,535 calls (73 calls a second): the profile only needs to
// know whether an agent makes more than 100 calls a day.
type dayCounter struct {
	Head  int64            `json:"head"`
	Slots [daySlots]uint16 `json:"slots"`
}

func (d *dayCounter) advance(idx int64) {
	if idx > d.Head {
		advanceRing(d.Slots[:], &d.Head, idx)
	}
}

func (d *dayCounter) add(t int64) { d.addN(t, 1) }

// addN counts n calls at time t.
func (d *dayCounter) addN(t int64, n uint64) {
	idx := max(t, 0) / int64(daySlot)
	d.advance(idx)
	if idx <= d.Head-daySlots {
		idx = d.Head
	}
	s := &d.Slots[idx%daySlots]
	*s = uint16(min(uint64(*s)+n, math.MaxUint16))
}

// rate returns the calls counted in the last 24 hours and the time they
// span: from the start of the oldest bucket with calls to now.
func (d *dayCounter) rate(now int64) (int, time.Duration) {
	n := d.sum(now)
	for i := int64(daySlots - 1); i >= 0; i-- {
		idx := d.Head - i
		if idx >= 0 && d.Slots[idx%daySlots] != 0 {
			return n, time.Duration(now - idx*int64(daySlot))
		}
	}
	return n, 0
}

func (d *dayCounter) sum(now int64) int {
	d.advance(now / int64(daySlot))
	n := 0
	for _, c := range d.Slots {
		n += int(c)
	}
	return n
}

// failRecord is a failure kept with its text.
type failRecord struct {
	End     int64  `json:"e"`
	Dur     int64  `json:"d"`
	Err     string `json:"err"`
	Version int32  `json:"v"`
	Cl      uint32 `json:"cl,omitempty"` // low 32 bits of the cluster ID
}

// tracker holds an agent's rolling statistics. It knows time and counts,
// nothing of configs or strategies. It is guarded by the agent's mutex, and
// every method is O(1): the work per call does not depend on history.
type tracker struct {
	Win window     `json:"window"`
	Day dayCounter `json:"day"`
	// FailEnd and FailGen are when each of the last failRing failed calls
	// ended (Unix nanoseconds; 0 for none) and the low 32 bits of the
	// config generation it started under.
	FailEnd [failRing]int64        `json:"fail_end"`
	FailGen [failRing]uint32       `json:"fail_gen"`
	Recent  [recentRing]failRecord `json:"recent"`
	// CallEnd and CallDur are when each of the last maxBeforeCalls
	// counted calls ended (Unix nanoseconds; 0 for none) and how long it
	// took; bit i of CallFail marks CallEnd[i] as a failure. They give the
	// recent regime a change is judged against.
	CallEnd  [maxBeforeCalls]int64 `json:"call_end"`
	CallDur  [maxBeforeCalls]int64 `json:"call_dur"`
	CallFail uint16                `json:"call_fail"`
	CallPos  uint8                 `json:"call_pos"`
	FailPos  uint8                 `json:"fail_pos"`
	RecPos   uint8                 `json:"recent_pos"`
	Consec   int                   `json:"consecutive"`
	Total    int64                 `json:"total"`
	Ignored  int64                 `json:"ignored"`
	// Outages logs the runs of at least longRun failures in a row (see
	// outages.go); nil until the agent's first.
	Outages *outageLog `json:"outages,omitempty"`
}

// record counts one call that started under config generation gen and
// ended at end (Unix nanoseconds) after dur. errText is kept for failures
// only.
func (t *tracker) record(gen uint64, end int64, dur time.Duration, failed bool, version int, errText string, cl uint32) {
	t.Total++
	t.Day.add(end)
	s := t.Win.at(end)
	s.Calls++
	s.Latency += int64(dur)
	i := t.CallPos % maxBeforeCalls
	t.CallEnd[i], t.CallDur[i] = max(end, 1), int64(dur)
	t.CallFail &^= 1 << i
	if failed {
		t.CallFail |= 1 << i
	}
	t.CallPos = (i + 1) % maxBeforeCalls
	if !failed {
		t.Consec = 0
		return
	}
	s.Failures++
	t.Consec++
	t.noteRun(end)
	t.FailEnd[t.FailPos], t.FailGen[t.FailPos] = end, uint32(gen)
	t.FailPos = (t.FailPos + 1) % failRing
	t.Recent[t.RecPos] = failRecord{End: end, Dur: int64(dur), Err: errText, Version: int32(version), Cl: cl}
	t.RecPos = (t.RecPos + 1) % recentRing
}

// addSuccesses counts n successful calls that took lat nanoseconds in
// all, as ending at end (Unix nanoseconds): calls booked without the lock
// (at most maxBeforeCalls of them enter the recent regime, each with the
// mean duration).
func (t *tracker) addSuccesses(end int64, n uint64, lat int64) {
	t.Total += int64(n)
	t.Day.addN(end, n)
	s := t.Win.at(end)
	s.Calls = uint32(min(uint64(s.Calls)+n, math.MaxUint32))
	s.Latency += lat
	dur := lat / int64(n)
	for range min(n, maxBeforeCalls) {
		i := t.CallPos % maxBeforeCalls
		t.CallEnd[i], t.CallDur[i] = max(end, 1), dur
		t.CallFail &^= 1 << i
		t.CallPos = (i + 1) % maxBeforeCalls
	}
	t.Consec = 0
}

// bucketEnd is when the current buckets of the window and of the day
// counter end, whichever first (Unix nanoseconds).
func (t *tracker) bucketEnd() int64 {
	return min((t.Win.Head+1)*t.Win.Width, (t.Day.Head+1)*int64(daySlot))
}

// failuresOf counts the kept failures of calls that started under config
// generation gen and ended after windowStart. It is exact up to failRing
// failures.
func (t *tracker) failuresOf(gen uint64, windowStart int64) int {
	n, g := 0, uint32(gen)
	for i, end := range t.FailEnd {
		if end != 0 && end > windowStart && t.FailGen[i] == g {
			n++
		}
	}
	return n
}

// clusterFailures counts the kept failures (the last recentRing) of the
// cluster whose ID's low 32 bits are cl, under config version version,
// that ended after windowStart.
func (t *tracker) clusterFailures(cl uint32, version int, windowStart int64) int {
	n := 0
	for _, r := range t.Recent {
		if r.End > windowStart && r.Cl == cl && int(r.Version) == version {
			n++
		}
	}
	return n
}

// mostOf returns the cluster (the low 32 bits of its ID) of most of the
// kept failures under config version that ended after windowStart; on a
// tie, cl, the cluster of the failure that crossed the threshold. 0 when
// none is kept.
func (t *tracker) mostOf(cl uint32, version int, windowStart int64) uint32 {
	best, most := cl, t.clusterFailures(cl, version, windowStart)
	for _, r := range t.Recent {
		if r.End > windowStart && int(r.Version) == version && r.Cl != best {
			if n := t.clusterFailures(r.Cl, version, windowStart); n > most {
				best, most = r.Cl, n
			}
		}
	}
	if most == 0 {
		return 0
	}
	return best
}

// clusterShare counts the kept failures that ended after windowStart
// under config version: n of cluster cl (low 32 bits), and all of them.
func (t *tracker) clusterShare(cl uint32, version int, windowStart int64) (n, all int) {
	for _, r := range t.Recent {
		if r.End > windowStart && int(r.Version) == version {
			all++
			if r.Cl == cl {
				n++
			}
		}
	}
	return n, all
}

// consecutiveOf counts the latest consecutive failures that started
// under config generation gen (at most failRing).
func (t *tracker) consecutiveOf(gen uint64) int {
	n := 0
	for n < min(t.Consec, failRing) {
		i := (int(t.FailPos) - 1 - n + failRing) % failRing
		if t.FailEnd[i] == 0 || t.FailGen[i] != uint32(gen) {
			break
		}
		n++
	}
	return n
}

// faultStart returns when the fault began: the end of the oldest kept
// failure that ended after windowStart, or 0 when there is none.
func (t *tracker) faultStart(windowStart int64) int64 {
	var start int64
	for _, end := range t.FailEnd {
		if end != 0 && end > windowStart && (start == 0 || end < start) {
			start = end
		}
	}
	return start
}

// regime returns the stats of the last n (at most maxBeforeCalls) counted
// calls that ended at or after since.
func (t *tracker) regime(since int64, n int) Stats {
	var calls, failures int
	var latency, ok time.Duration
	for k := range min(n, maxBeforeCalls) {
		i := (int(t.CallPos) - 1 - k + 2*maxBeforeCalls) % maxBeforeCalls
		if t.CallEnd[i] == 0 || t.CallEnd[i] < since {
			break
		}
		calls++
		latency += time.Duration(t.CallDur[i])
		if t.CallFail&(1<<i) != 0 {
			failures++
		} else {
			ok += time.Duration(t.CallDur[i])
		}
	}
	s := newStats(calls, failures, latency)
	s.SuccessLatency = ok
	return s
}

// recentFailures returns the kept failures that ended after windowStart,
// oldest first; cluster names each one's class and cluster from the low
// bits of its cluster ID.
func (t *tracker) recentFailures(windowStart int64, cluster func(lo uint32) (failure.Class, string)) []Failure {
	var out []Failure
	for i := range recentRing {
		r := t.Recent[(int(t.RecPos)+i)%recentRing]
		if r.End == 0 || r.End <= windowStart {
			continue
		}
		f := Failure{
			Time:     time.Unix(0, r.End).UTC(),
			Duration: time.Duration(r.Dur),
			Err:      r.Err,
			Version:  int(r.Version),
		}
		f.Class, f.Cluster = cluster(r.Cl)
		out = append(out, f)
	}
	return out
}

// stats returns the window's counts at time now.
func (t *tracker) stats(now int64) Stats {
	c, f, l := t.Win.sum(now)
	s := newStats(c, f, l)
	s.ConsecutiveFailures = t.Consec
	s.CallsPerDay = t.Day.sum(now)
	s.TotalCalls = t.Total
	s.Ignored = t.Ignored
	return s
}

// counts accumulates the calls credited to one config version while it is
// verified.
type counts struct {
	Calls     int   `json:"calls"`
	Failures  int   `json:"failures"`
	Latency   int64 `json:"latency_ns"`
	OKLatency int64 `json:"ok_latency_ns,omitempty"` // of the successful calls
	// Consec is the run of failures the calls end with; Alike and
	// AlikeLatency count the successes the previous config would have
	// served alike, for a change that raised a bound (see servedAlike).
	// Both counts saturate.
	Consec       int32 `json:"consecutive"`
	Alike        int32 `json:"alike,omitempty"`
	AlikeLatency int64 `json:"alike_latency_ns,omitempty"`
}

func (c *counts) add(dur time.Duration, failed bool) {
	c.Calls++
	c.Latency += int64(dur)
	if failed {
		c.Failures++
		if c.Consec < math.MaxInt32 {
			c.Consec++
		}
	} else {
		c.OKLatency += int64(dur)
		c.Consec = 0
	}
}

// alike books a success the previous config would have served alike.
func (c *counts) alike(dur time.Duration) {
	if c.Alike < math.MaxInt32 {
		c.Alike++
	}
	c.AlikeLatency += int64(dur)
}

func (c counts) stats() Stats {
	s := newStats(c.Calls, c.Failures, time.Duration(c.Latency))
	s.ConsecutiveFailures = int(c.Consec)
	s.SuccessLatency = time.Duration(c.OKLatency)
	return s
}

// streak counts the calls of the previous config during the change's
// current run of consecutive failures (MethodCanary): those between two of
// its failures. A call of the previous config after the run's latest
// failure waits in the tail until the change fails again (the run goes
// on: the call counts) or succeeds (the run is over): a success after the
// run, such as the first call after an outage both configs shared, says
// nothing about it. The tail is not kept across a restart.
// The tail's counts are 32 bits (saturating), so that an agent stays in its
// size class (TestAgentSizeClass).
type streak struct {
	Calls, Failures         int
	tailCalls, tailFailures int32
}

// add counts a call of the previous config into the tail.
func (k *streak) add(failed bool) {
	if k.tailCalls < math.MaxInt32 {
		k.tailCalls++
		if failed {
			k.tailFailures++
		}
	}
}

// extend counts the tail: the change failed again.
func (k *streak) extend() {
	k.Calls, k.Failures = k.Calls+int(k.tailCalls), k.Failures+int(k.tailFailures)
	k.tailCalls, k.tailFailures = 0, 0
}

func (k streak) stats() Stats { return newStats(k.Calls, k.Failures, 0) }

// health is the recency-weighted success rate of the window at time now:
// each of the window's 64 buckets weighs 2^(-age/halfLife), its age taken
// from its midpoint, with halfLife = HealthHalfLife × window. 1 when the
// window has no calls.
func (t *tracker) health(now int64) float64 {
	w := &t.Win
	w.advance(max(now, 0) / w.Width)
	half := HealthHalfLife * float64(w.Width*windowSlots)
	var calls, ok float64
	for i := int64(0); i < windowSlots; i++ {
		idx := w.Head - i
		if idx < 0 {
			break
		}
		s := w.Slots[idx%windowSlots]
		if s.Calls == 0 {
			continue
		}
		age := max(float64(now)-(float64(idx)+0.5)*float64(w.Width), 0)
		wt := math.Exp2(-age / half)
		calls += wt * float64(s.Calls)
		ok += wt * float64(s.Calls-min(s.Failures, s.Calls))
	}
	if calls == 0 {
		return 1
	}
	return ok / calls
}

const (
	// maxBeforeCalls is how many recent calls each agent keeps for the
	// recent regime: the largest BeforeCalls.
	maxBeforeCalls = 16
	// runOdds is how unlikely, under the reference failure rate, a run of
	// consecutive failures must be to roll a change back.
	runOdds = 0.001
	// gainZ is how many standard errors the success rate must rise for a
	// latency rise up to MaxLatencyRiseOnGain to be kept.
	gainZ = 1.96
	// maxCanaryFraction caps CanaryFraction.
	maxCanaryFraction = 0.5
)

// CallBucket is one bucket of an agent's analysis window (see Stats): the
// calls that ended in [Start, Start+Width), how many of them failed, and
// the sum of their durations.
type CallBucket struct {
	Start    time.Time     `json:"start"`
	Width    time.Duration `json:"width_ns"`
	Calls    int           `json:"calls"`
	Failures int           `json:"failures"`
	Latency  time.Duration `json:"latency_ns"`
}

// buckets appends the window's buckets with calls at time now to dst,
// oldest first. ViewCalls gives it a copy of the window at the threshold's
// width (readTracker).
func (w *window) buckets(now int64, dst []CallBucket) []CallBucket {
	w.advance(max(now, 0) / w.Width)
	for i := int64(windowSlots - 1); i >= 0; i-- {
		idx := w.Head - i
		if idx < 0 {
			continue
		}
		b := w.Slots[idx%windowSlots]
		if b.Calls == 0 {
			continue
		}
		dst = append(dst, CallBucket{Start: time.Unix(0, idx*w.Width).UTC(), Width: time.Duration(w.Width),
			Calls: int(b.Calls), Failures: int(min(b.Failures, b.Calls)), Latency: time.Duration(b.Latency)})
	}
	return dst
}
