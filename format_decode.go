package selfimprove

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Decoding: a document, checked, as the in-memory state.

// checker range-checks a document's fields and keeps the first error,
// which names the field.
type checker struct {
	err    error
	maxVer int64 // the document's max_version, once checked
}

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// num checks that v is in [lo, hi) and returns it.
func (c *checker) num(f field, v, lo, hi int64) int64 {
	if v < lo || v >= hi {
		c.fail("%s: %d out of range [%d, %d)", f, v, lo, hi)
	}
	return v
}

// Bounds of stored times: from 1970 to before 2^62 ns later.
var (
	minStoredTime = time.Unix(0, 0)
	maxStoredTime = time.Unix(0, maxNanos)
)

// time checks that t is a storable time and returns it as Unix ns.
func (c *checker) time(f field, t time.Time) int64 {
	if t.Before(minStoredTime) || !t.Before(maxStoredTime) {
		c.fail("%s: %s out of range [%s, %s)", f, t.Format(time.RFC3339Nano),
			minStoredTime.UTC().Format(time.RFC3339), maxStoredTime.UTC().Format(time.RFC3339Nano))
		return 0
	}
	return t.UnixNano()
}

// optTime is time with the zero time.Time for none (0).
func (c *checker) optTime(f field, t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return c.time(f, t)
}

// config checks a config and its version, at least minVersion.
func (c *checker) config(f field, cfg *Config, minVersion int64) {
	if err := cfg.validate(); err != nil {
		c.fail("%s: %w", f, err)
	}
	c.num(f.dot("version"), int64(cfg.Version), minVersion, c.maxVer+1)
}

// stats checks the counts of a Stats.
func (c *checker) stats(f field, s *Stats) {
	calls := c.num(f.dot("calls"), int64(s.Calls), 0, maxCount)
	c.num(f.dot("failures"), int64(s.Failures), 0, calls+1)
	c.num(f.dot("consecutive_failures"), int64(s.ConsecutiveFailures), 0, maxCount)
	c.num(f.dot("total_latency_ns"), int64(s.TotalLatency), 0, maxNanos)
	c.num(f.dot("avg_latency_ns"), int64(s.AvgLatency), 0, maxNanos)
	c.num(f.dot("window_ns"), int64(s.Window), 0, int64(maxWindow)+1)
	c.num(f.dot("calls_per_day"), int64(s.CallsPerDay), 0, maxCount)
	c.num(f.dot("total_calls"), s.TotalCalls, 0, maxCount)
	c.num(f.dot("ignored"), s.Ignored, 0, maxCount)
	if !(s.SuccessRate >= 0 && s.SuccessRate <= 1) {
		c.fail("%s: %v out of range [0, 1]", f.dot("success_rate"), s.SuccessRate)
	}
}

// change checks a change.
func (c *checker) change(f field, ch *Change) {
	c.config(f.dot("from"), &ch.From, 1)
	c.config(f.dot("to"), &ch.To, 1)
	c.stats(f.dot("before"), &ch.Before)
	c.stats(f.dot("after"), &ch.After)
	if ch.Window != nil {
		c.stats(f.dot("window"), ch.Window)
	}
	if ch.Control != nil {
		c.stats(f.dot("control"), ch.Control)
	}
	c.optTime(f.dot("applied_at"), ch.AppliedAt)
	c.optTime(f.dot("decided_at"), ch.DecidedAt)
}

// counts checks the counts of one side of a verification.
func (c *checker) counts(f field, d countsDoc) counts {
	calls := c.num(f.dot("calls"), d.Calls, 0, maxCount)
	failures := c.num(f.dot("failures"), d.Failures, 0, calls+1)
	lat := c.num(f.dot("latency_ns"), d.LatencyNS, 0, maxNanos)
	consec := c.num(f.dot("consecutive_failures"), d.ConsecutiveFailures, 0, failures+1)
	okLat := c.num(f.dot("success_latency_ns"), d.SuccessLatencyNS, 0, d.LatencyNS+1)
	return counts{
		Calls:     int(calls),
		Failures:  int(failures),
		Latency:   lat,
		Consec:    int32(min(consec, math.MaxInt32)),
		OKLatency: okLat,
		Alike:     int32(min(c.num(f.dot("alike_calls"), d.AlikeCalls, 0, calls-failures+1), math.MaxInt32)),
		// The successes served alike are some of the successes.
		AlikeLatency: c.num(f.dot("alike_latency_ns"), d.AlikeLatencyNS, 0, okLat+1),
	}
}

// streak checks the calls of a canary's previous config since the
// change's run of failures began: their latency is not kept.
func (c *checker) streak(f field, d countsDoc) streak {
	k := c.counts(f, d)
	return streak{Calls: k.Calls, Failures: k.Failures}
}

// ring returns the slot of the k-th of n entries, oldest first, in a ring
// of size slots whose next entry goes to slot next.
func ringSlot(next, n, k, size int) int {
	return ((next-n+k)%size + size) % size
}

// bucketIndex checks a bucket's start against its ring (width, newest
// index head, size slots, previous index prev) and returns its index.
func (c *checker) bucketIndex(f field, start time.Time, width, head, size, prev int64) int64 {
	f = f.dot("start")
	s := c.time(f, start)
	if c.err != nil {
		return 0
	}
	idx := s / width
	switch {
	case s%width != 0:
		c.fail("%s: %s is not on a bucket boundary", f, start.Format(time.RFC3339Nano))
	case idx <= head-size || idx > head:
		c.fail("%s: %s is outside the window", f, start.Format(time.RFC3339Nano))
	case idx <= prev:
		c.fail("%s: %s is not after the previous bucket", f, start.Format(time.RFC3339Nano))
	}
	return idx
}

// head checks a ring's bucket width, in [lo, hi], and its newest bucket,
// and returns the newest bucket's index.
func (c *checker) head(f field, width, lo, hi int64, newest time.Time) int64 {
	c.num(f.dot("bucket_ns"), width, lo, hi+1)
	n := c.time(f.dot("newest"), newest)
	if c.err != nil {
		return 0
	}
	if n%width != 0 {
		c.fail("%s: %s is not on a bucket boundary", f.dot("newest"), newest.Format(time.RFC3339Nano))
	}
	return n / width
}

// clusterLow reads a failure's cluster: 16 hex digits, or the 8 hex
// digits of the low 32 bits of an ID no longer kept, or none.
func (c *checker) clusterLow(f field, s string) uint32 {
	if s == "" {
		return 0
	}
	var v uint64
	var err error
	switch len(s) {
	case 16:
		v, err = failure.ParseClusterID(s)
	case 8:
		v, err = strconv.ParseUint(s, 16, 32)
	default:
		err = errors.New("not 8 or 16 hex digits")
	}
	if err != nil {
		c.fail("%s: %q: %v", f, s, err)
	}
	return uint32(v)
}

// calls checks the call statistics and rebuilds the tracker. It stops at
// the first error in a list, leaving the rest of the tracker empty.
func (c *checker) calls(d *callsDoc) tracker {
	var t tracker
	t.Total = c.num(path("calls.total"), d.Total, 0, maxCount)
	t.Ignored = c.num(path("calls.ignored"), d.Ignored, 0, maxCount)
	t.Consec = int(c.num(path("calls.consecutive_failures"), d.ConsecutiveFailures, 0, maxCount))
	if !c.callWindow(&t.Win, &d.Window) || !c.last24h(&t.Day, &d.Last24h) {
		return t
	}
	pos := d.RingPos
	t.FailPos = uint8(c.num(path("calls.ring_pos.failures"), pos.Failures, 0, failRing))
	t.RecPos = uint8(c.num(path("calls.ring_pos.failure_details"), pos.FailureDetails, 0, recentRing))
	t.CallPos = uint8(c.num(path("calls.ring_pos.latest"), pos.Latest, 0, maxBeforeCalls))
	if c.failures(&t, d.Failures) {
		c.latest(&t, d.Latest)
	}
	c.outages(&t, d.Outages)
	return t
}

// outages checks the logged outages, oldest first, into t.
func (c *checker) outages(t *tracker, ds []outageDoc) {
	if len(ds) == 0 {
		return
	}
	if len(ds) > maxOutages {
		c.fail("calls.outages: %d outages, more than %d", len(ds), maxOutages)
		return
	}
	t.Outages = new(outageLog)
	for k, d := range ds {
		f := elem("calls.outages", k)
		t.Outages.Runs[k] = outage{End: c.time(f.dot("end"), d.End), Failures: uint32(c.num(f.dot("failures"), d.Failures, longRun, math.MaxUint32+1))}
	}
	t.Outages.N = uint8(len(ds))
}

// callWindow checks the analysis window's buckets and rebuilds w; false when
// it stopped at an error.
func (c *checker) callWindow(w *window, d *windowDoc) bool {
	w.Width = d.BucketNS
	w.Head = c.head(path("calls.window"), w.Width, minSlot, maxSlot, d.Newest)
	prev, total := int64(-1), int64(0)
	for k, b := range d.Buckets {
		if c.err != nil {
			return false
		}
		f := elem("calls.window.buckets", k)
		prev = c.bucketIndex(f, b.Start, w.Width, w.Head, windowSlots, prev)
		calls := c.num(f.dot("calls"), b.Calls, 0, math.MaxUint32+1)
		failures := c.num(f.dot("failures"), b.Failures, 0, calls+1)
		lat := c.num(f.dot("latency_ns"), b.LatencyNS, 0, maxNanos-total)
		total += lat
		w.Slots[prev%windowSlots] = slot{Calls: uint32(calls), Failures: uint32(failures), Latency: lat}
	}
	return true
}

// last24h checks the 24-hour counter's buckets and rebuilds dc; false when it
// stopped at an error.
func (c *checker) last24h(dc *dayCounter, d *dayDoc) bool {
	dc.Head = c.head(path("calls.last_24h"), d.BucketNS, int64(daySlot), int64(daySlot), d.Newest)
	prev := int64(-1)
	for k, b := range d.Buckets {
		if c.err != nil {
			return false
		}
		f := elem("calls.last_24h.buckets", k)
		prev = c.bucketIndex(f, b.Start, int64(daySlot), dc.Head, daySlots, prev)
		dc.Slots[prev%daySlots] = uint16(c.num(f.dot("calls"), b.Calls, 0, math.MaxUint16+1))
	}
	return true
}

// failures checks the failure times and details into t's rings (t's ring
// positions already set); false when it stopped at an error.
func (c *checker) failures(t *tracker, fails []failureDoc) bool {
	n := len(fails)
	if n > failRing {
		c.fail("calls.failures: %d failures, at most %d", n, failRing)
	}
	firstDetailed := n
	for k := range fails {
		if fails[k].detailed() {
			firstDetailed = k
			break
		}
	}
	if n-firstDetailed > recentRing {
		c.fail("calls.failures: %d failures with details, at most %d", n-firstDetailed, recentRing)
	}
	maxFailVersion := min(c.maxVer, math.MaxInt32)
	for k := range fails {
		if c.err != nil {
			return false
		}
		fd, f := &fails[k], elem("calls.failures", k)
		end := c.time(f.dot("end"), fd.End)
		if end == 0 {
			c.fail("%s: a failure ends after 1970-01-01T00:00:00Z", f.dot("end"))
		}
		i := ringSlot(int(t.FailPos), n, k, failRing)
		t.FailEnd[i] = end
		t.FailGen[i] = uint32(c.num(f.dot("generation"), fd.Generation, 0, math.MaxUint32+1))
		if k < firstDetailed {
			continue
		}
		if !fd.detailed() {
			c.fail("%s: no details after a failure with details", f)
			return false
		}
		r := failRecord{End: end, Cl: c.clusterLow(f.dot("cluster"), fd.Cluster)}
		if fd.DurationNS != nil {
			r.Dur = c.num(f.dot("duration_ns"), *fd.DurationNS, 0, maxNanos)
		}
		if fd.Version == nil {
			c.fail("%s: missing", f.dot("version"))
		} else {
			r.Version = int32(c.num(f.dot("version"), *fd.Version, 1, maxFailVersion+1))
		}
		if fd.Error != nil {
			r.Err = *fd.Error
		}
		t.Recent[ringSlot(int(t.RecPos), n-firstDetailed, k-firstDetailed, recentRing)] = r
	}
	return true
}

// latest checks the latest calls into t's ring (its position already
// set).
func (c *checker) latest(t *tracker, latest []latestDoc) {
	n := len(latest)
	if n > maxBeforeCalls {
		c.fail("calls.latest: %d calls, at most %d", n, maxBeforeCalls)
		return
	}
	for k, l := range latest {
		f := elem("calls.latest", k)
		i := ringSlot(int(t.CallPos), n, k, maxBeforeCalls)
		t.CallEnd[i] = c.time(f.dot("end"), l.End)
		if t.CallEnd[i] == 0 && c.err == nil {
			c.fail("%s: a call ends after 1970-01-01T00:00:00Z", f.dot("end"))
		}
		t.CallDur[i] = c.num(f.dot("duration_ns"), l.DurationNS, 0, maxNanos)
		if l.Failed {
			t.CallFail |= 1 << i
		}
	}
}

// cluster checks failure cluster i and rebuilds its record.
func (c *checker) cluster(i int, d *clusterDoc) clusterRec {
	var r clusterRec
	f := elem("clusters", i)
	id, err := failure.ParseClusterID(d.ID)
	if err != nil {
		c.fail("%s: %v", f.dot("id"), err)
	}
	r.ID, r.Sig, r.Class = id, d.Signature, d.Class
	r.Total = c.num(f.dot("total"), d.Total, 0, maxCount)
	r.First = c.time(f.dot("first_seen"), d.FirstSeen)
	r.Last = c.time(f.dot("last_seen"), d.LastSeen)
	if r.First > r.Last {
		c.fail("%s: after last_seen", f.dot("first_seen"))
	}
	r.Examples[0], r.Examples[maxExample-1] = d.FirstExample, d.LatestExample
	if r.From = d.From; len(r.From) > maxFrom {
		c.fail("%s: longer than %d bytes", f.dot("from"), maxFrom)
	}
	r.Width = d.Window.BucketNS
	r.Head = c.head(f.dot("window"), r.Width, minSlot, maxSlot*(windowSlots/clusterSlots), d.Window.Newest)
	if c.err != nil || len(d.Window.Buckets) == 0 {
		return r
	}
	buckets := fmt.Sprintf("clusters[%d].window.buckets", i)
	prev := int64(-1)
	for k, b := range d.Window.Buckets {
		if c.err != nil {
			break
		}
		bf := elem(buckets, k)
		prev = c.bucketIndex(bf, b.Start, r.Width, r.Head, clusterSlots, prev)
		r.Slots[prev%clusterSlots] = uint32(c.num(bf.dot("failures"), b.Failures, 0, math.MaxUint32+1))
	}
	return r
}

// state checks the document of agent id and returns it as the in-memory
// state.
func (d *stateDoc) state(id string) (agentState, error) {
	raw, err := base64.StdEncoding.DecodeString(d.AgentIDB64)
	switch {
	case err != nil:
		return agentState{}, fmt.Errorf("agent_id_b64: %v", err)
	case string(raw) != id:
		return agentState{}, errors.New("file belongs to another agent ID")
	}
	c := &checker{maxVer: maxVersionLimit}
	c.maxVer = c.num(path("max_version"), d.MaxVersion, 1, maxVersionLimit+1)
	st := agentState{
		AgentID:     id,
		Config:      d.Config,
		History:     d.History,
		MaxVersion:  int(c.maxVer),
		Verifying:   d.Verifying,
		Verify:      c.counts(path("verify"), d.Verify),
		Control:     c.counts(path("control"), d.Control),
		Streak:      c.streak(path("streak"), d.Streak),
		Changes:     d.Changes,
		Gen:         uint64(c.num(path("generation"), d.Generation, 0, maxCount)),
		Manual:      d.Threshold,
		Critical:    d.Critical,
		ProposeOnly: d.ProposeOnly,
		Rejected:    d.Rejected,
		Proposals:   d.Proposals,
	}
	st.ownChanges(id)
	c.cooldowns(d, &st)
	c.configs(&st)
	if len(d.Clusters) > maxClusters {
		c.fail("clusters: %d clusters, at most %d", len(d.Clusters), maxClusters)
	}
	c.proposals(st.Proposals)
	if c.err != nil {
		return agentState{}, c.err
	}
	st.Tracker = c.calls(&d.Calls)
	if len(d.Clusters) > 0 {
		st.Clusters = make([]clusterRec, 0, len(d.Clusters))
	}
	for i := range d.Clusters {
		if c.err != nil {
			break
		}
		st.Clusters = append(st.Clusters, c.cluster(i, &d.Clusters[i]))
	}
	if c.err != nil {
		return agentState{}, c.err
	}
	if err := st.check(id); err != nil {
		return agentState{}, err
	}
	return st, nil
}

// cooldowns checks the cooldown and the circuit breaker's deadline of d
// into st.
func (c *checker) cooldowns(d *stateDoc, st *agentState) {
	st.CooldownUntil = c.optTime(path("cooldown_until"), d.CooldownUntil)
	st.CooldownEarly = d.CooldownEarly
	if d.CooldownCluster != "" {
		id, err := failure.ParseClusterID(d.CooldownCluster)
		if err != nil {
			c.fail("%s: %v", path("cooldown_cluster"), err)
		}
		st.CooldownCluster = id
	}
	st.CircuitOpenUntil = c.optTime(path("circuit_open_until"), d.CircuitOpenUntil)
	if d.Route != nil {
		st.Route = c.route(d.Route)
	}
	if len(d.Quality) > 0 || d.QualityWatch != nil || d.Exploration != nil {
		st.Quality = c.quality(d.Quality, d.QualityWatch)
		c.answered(st.Quality, d.QualityAnswered)
		c.exploration(st.Quality, d.Exploration)
	}
}

// configs checks st's configs: the current one, the history, the change
// under verification and the decided ones, the manual threshold and the
// rejected tweaks.
func (c *checker) configs(st *agentState) {
	c.config(path("config"), &st.Config, 1)
	if len(st.History) > maxHistory {
		c.fail("history: %d configs, at most %d", len(st.History), maxHistory)
	}
	for i := range st.History {
		c.config(elem("history", i), &st.History[i], 1)
	}
	if st.Verifying != nil {
		c.change(path("verifying"), st.Verifying)
		if c.err == nil && st.Verifying.To.Version != st.Config.Version {
			c.fail("verifying: the change under verification is not the current config")
		}
	}
	if len(st.Changes) > maxChanges {
		c.fail("changes: %d changes, at most %d", len(st.Changes), maxChanges)
	}
	for i := range st.Changes {
		c.change(elem("changes", i), &st.Changes[i])
	}
	if st.Manual != nil {
		if err := st.Manual.threshold().validate(); err != nil {
			c.fail("threshold: %w", err)
		}
	}
	if len(st.Rejected) > maxRejected {
		c.fail("rejected: %d tweaks, at most %d", len(st.Rejected), maxRejected)
	}
	for i := range st.Rejected {
		c.config(elem("rejected", i).dot("config"), &st.Rejected[i].Config, 1)
	}
}

// proposals checks the proposals' counts, suggested versions, confidence
// and times.
func (c *checker) proposals(ps []Proposal) {
	if len(ps) > maxProposals {
		c.fail("proposals: %d proposals, at most %d", len(ps), maxProposals)
	}
	for i := range ps {
		p, f := &ps[i], elem("proposals", i)
		c.num(f.dot("count"), int64(p.Count), 0, maxCount)
		if p.Config != nil {
			// Only a suggestion: it is checked when it is approved.
			c.num(f.dot("config").dot("version"), int64(p.Config.Version), 0, c.maxVer+1)
		}
		if !(p.Confidence >= 0 && p.Confidence <= 1) {
			c.fail("%s: %v out of range [0, 1]", f.dot("confidence"), p.Confidence)
		}
		c.optTime(f.dot("created"), p.Created)
		c.optTime(f.dot("updated"), p.Updated)
	}
}

// ownChanges sets the agent ID of st's changes and proposals to id, the
// exact one: the readable copy in a file is not exact. The slices are
// copied before they are modified.
func (st *agentState) ownChanges(id string) {
	if v := st.Verifying; v != nil && v.AgentID != id {
		c := *v
		c.AgentID = id
		st.Verifying = &c
	}
	if slices.ContainsFunc(st.Changes, func(c Change) bool { return c.AgentID != id }) {
		st.Changes = slices.Clone(st.Changes)
		for i := range st.Changes {
			st.Changes[i].AgentID = id
		}
	}
	if slices.ContainsFunc(st.Proposals, func(p Proposal) bool { return p.AgentID != id }) {
		st.Proposals = slices.Clone(st.Proposals)
		for i := range st.Proposals {
			st.Proposals[i].AgentID = id
		}
	}
}

// check validates a state for agent id: the invariants the loop relies
// on, whatever the state came from.
func (st *agentState) check(id string) error {
	switch {
	case st.AgentID != id:
		return errors.New("file belongs to another agent ID")
	case st.Tracker.Win.Width < minSlot || st.Tracker.Win.Width > maxSlot:
		return errors.New("window width out of range")
	case st.Tracker.Win.Head < 0 || st.Tracker.Win.Head > math.MaxInt64/st.Tracker.Win.Width ||
		st.Tracker.Day.Head < 0 || st.Tracker.Day.Head > math.MaxInt64/int64(daySlot):
		return errors.New("window position out of range")
	case st.Tracker.FailPos >= failRing || st.Tracker.RecPos >= recentRing || st.Tracker.CallPos >= maxBeforeCalls:
		return errors.New("ring position out of range")
	case st.Verifying != nil && st.Verifying.To.Version != st.Config.Version:
		return errors.New("change under verification is not the current config")
	}
	if err := st.Config.validate(); err != nil {
		return err
	}
	if len(st.Clusters) > maxClusters || len(st.Proposals) > maxProposals {
		return errors.New("too many clusters or proposals")
	}
	for _, c := range st.Clusters {
		if c.Width < minSlot || c.Width > maxSlot*(windowSlots/clusterSlots) || c.Head < 0 || c.Head > math.MaxInt64/c.Width {
			return errors.New("cluster window out of range")
		}
	}
	if st.Manual != nil {
		if err := st.Manual.threshold().validate(); err != nil {
			return err
		}
	}
	return nil
}
