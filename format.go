package selfimprove

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// The agent state file (agents/<name>.json) is a documented schema,
// independent of the in-memory layout: docs/format.md describes it field
// by field. Writers write format 2; readers accept formats 1 and 2, and a
// file of any other format is set aside as corrupt.
//
// Format 2 stores times as RFC 3339 (UTC, nanoseconds where they matter),
// durations as integers with a unit suffix (_ns), and every ring buffer as
// a list: time buckets as the non-empty buckets with their start, events
// (failures, calls) oldest first, plus where the next entry goes in each
// ring so that a reload is exact. Format 1 was the in-memory layout itself
// (raw ring arrays); it is read into the same lists and checked by the
// same rules.
//
// Everything read is range-checked, so that a corrupt or hostile file is
// refused whole instead of overflowing a counter later.

// The state file formats.
const (
	stateFormatV1 = 1 // the in-memory layout, as written before format 2
	stateFormatV2 = 2 // the documented schema, written since
)

// Range bounds of what a state file may hold.
const (
	// maxCount bounds counters (calls, failures, generations, totals):
	// at a million calls a second, adding one cannot overflow an int64
	// for centuries.
	maxCount = 1 << 50
	// maxNanos bounds durations and latency sums (ns), and times (ns
	// since 1970: before 2116-02-20), so that adding a duration to a time
	// or summing a window cannot overflow.
	maxNanos = 1 << 62
	// maxVersionLimit bounds config versions (inclusive).
	maxVersionLimit = 1 << 40
)

// stateDoc is the agent state file, format 2.
type stateDoc struct {
	Format int `json:"format"`
	// AgentID is readable; AgentIDB64 is exact (JSON cannot carry
	// invalid UTF-8) and is the one that is read.
	AgentID    string   `json:"agent_id"`
	AgentIDB64 string   `json:"agent_id_b64"`
	Config     Config   `json:"config"`
	History    []Config `json:"history,omitempty"`
	MaxVersion int64    `json:"max_version"`
	Generation int64    `json:"generation"`

	Verifying *Change   `json:"verifying,omitempty"`
	Verify    countsDoc `json:"verify,omitzero"`
	Control   countsDoc `json:"control,omitzero"`
	Changes   []Change  `json:"changes,omitempty"`

	CooldownUntil    time.Time `json:"cooldown_until,omitzero"`
	CircuitOpenUntil time.Time `json:"circuit_open_until,omitzero"`

	Threshold *thresholdJSON `json:"threshold,omitempty"`
	Critical  bool           `json:"critical,omitempty"`
	Rejected  []Tweak        `json:"rejected,omitempty"`

	Calls     callsDoc     `json:"calls"`
	Clusters  []clusterDoc `json:"clusters,omitempty"`
	Proposals []Proposal   `json:"proposals,omitempty"`
}

// countsDoc is the calls credited to one side of a verification.
type countsDoc struct {
	Calls               int64 `json:"calls"`
	Failures            int64 `json:"failures"`
	LatencyNS           int64 `json:"latency_ns"`
	ConsecutiveFailures int64 `json:"consecutive_failures"`
}

// callsDoc is the agent's call statistics (the tracker).
type callsDoc struct {
	Total               int64        `json:"total"`
	Ignored             int64        `json:"ignored"`
	ConsecutiveFailures int64        `json:"consecutive_failures"`
	Window              windowDoc    `json:"window"`
	Last24h             dayDoc       `json:"last_24h"`
	Failures            []failureDoc `json:"failures,omitempty"`
	Latest              []latestDoc  `json:"latest,omitempty"`
	RingPos             ringPosDoc   `json:"ring_pos,omitzero"`
}

// windowDoc is the analysis window: its non-empty buckets, oldest first.
type windowDoc struct {
	BucketNS int64       `json:"bucket_ns"`
	Newest   time.Time   `json:"newest"`
	Buckets  []bucketDoc `json:"buckets,omitempty"`
}

type bucketDoc struct {
	Start     time.Time `json:"start"`
	Calls     int64     `json:"calls"`
	Failures  int64     `json:"failures"`
	LatencyNS int64     `json:"latency_ns"`
}

// dayDoc is the 24-hour call counter: its non-empty buckets, oldest first.
type dayDoc struct {
	BucketNS int64          `json:"bucket_ns"`
	Newest   time.Time      `json:"newest"`
	Buckets  []dayBucketDoc `json:"buckets,omitempty"`
}

type dayBucketDoc struct {
	Start time.Time `json:"start"`
	Calls int64     `json:"calls"`
}

// failureDoc is one kept failure. The latest ones (up to recentRing) carry
// their details: duration, version, error text and cluster.
type failureDoc struct {
	End        time.Time `json:"end"`
	Generation int64     `json:"generation"`
	DurationNS *int64    `json:"duration_ns,omitempty"`
	Version    *int64    `json:"version,omitempty"`
	Error      *string   `json:"error,omitempty"`
	Cluster    string    `json:"cluster,omitempty"`
}

func (f *failureDoc) detailed() bool {
	return f.DurationNS != nil || f.Version != nil || f.Error != nil || f.Cluster != ""
}

// latestDoc is one of the latest counted calls.
type latestDoc struct {
	End        time.Time `json:"end"`
	DurationNS int64     `json:"duration_ns"`
	Failed     bool      `json:"failed"`
}

// ringPosDoc says where the next entry goes in each event ring, so that
// a reload puts every entry back in its slot.
type ringPosDoc struct {
	Failures       int64 `json:"failures"`
	FailureDetails int64 `json:"failure_details"`
	Latest         int64 `json:"latest"`
}

// clusterDoc is one failure cluster.
type clusterDoc struct {
	ID            string           `json:"id"`
	Signature     string           `json:"signature"`
	Class         Class            `json:"class"`
	Total         int64            `json:"total"`
	FirstSeen     time.Time        `json:"first_seen"`
	LastSeen      time.Time        `json:"last_seen"`
	FirstExample  string           `json:"first_example"`
	LatestExample string           `json:"latest_example"`
	Window        clusterWindowDoc `json:"window"`
}

type clusterWindowDoc struct {
	BucketNS int64              `json:"bucket_ns"`
	Newest   time.Time          `json:"newest"`
	Buckets  []clusterBucketDoc `json:"buckets,omitempty"`
}

type clusterBucketDoc struct {
	Start    time.Time `json:"start"`
	Failures int64     `json:"failures"`
}

// encodeState returns st as a state file, format 2. It refuses a state
// that it could not read back (a time before 1970, a counter out of
// range): the previous file then stays in place.
func encodeState(st *agentState) ([]byte, error) {
	d, err := st.doc()
	if err != nil {
		return nil, fmt.Errorf("selfimprove: encode agent state: %w", err)
	}
	if _, err := d.state(st.AgentID); err != nil {
		return nil, fmt.Errorf("selfimprove: encode agent state: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("selfimprove: encode agent state: %w", err)
	}
	if b.Len() > maxStateFile {
		return nil, fmt.Errorf("selfimprove: encode agent state: %d bytes, more than a state file can be (%d)", b.Len(), maxStateFile)
	}
	return b.Bytes(), nil
}

// decodeState reads a state file of agent id, format 1 or 2, and checks
// it. Any error means the file is corrupt.
func decodeState(data []byte, id string) (agentState, error) {
	// Format 2 is read at once; anything else is read again by its format.
	var d stateDoc
	err := json.Unmarshal(data, &d)
	if err != nil || d.Format != stateFormatV2 {
		var probe struct {
			Format int64 `json:"format"`
		}
		if perr := json.Unmarshal(data, &probe); perr != nil {
			return agentState{}, perr
		}
		switch probe.Format {
		case stateFormatV1:
			var v stateV1
			if err := json.Unmarshal(data, &v); err != nil {
				return agentState{}, err
			}
			if d, err = v.doc(); err != nil {
				return agentState{}, fmt.Errorf("format 1: %w", err)
			}
			st, err := d.state(id)
			if err != nil {
				return agentState{}, fmt.Errorf("format 1: %w", err)
			}
			return st, nil
		case stateFormatV2:
			if err != nil {
				return agentState{}, err
			}
		default:
			return agentState{}, fmt.Errorf("unknown format %d", probe.Format)
		}
	}
	return d.state(id)
}

// field names a document field in an error, such as
// "changes[3].before.calls": base, then [i] when i >= 0, then .sub and
// .leaf when set. It is formatted only when a check fails, so that
// checking a valid document allocates no names.
type field struct {
	base      string
	i         int
	sub, leaf string
}

// path is the field named base.
func path(base string) field { return field{base: base, i: -1} }

// elem is element i of the list named base.
func elem(base string, i int) field { return field{base: base, i: i} }

// dot is f's member name.
func (f field) dot(name string) field {
	switch {
	case f.leaf == "":
	case f.sub == "":
		f.sub = f.leaf
	default:
		f.sub += "." + f.leaf
	}
	f.leaf = name
	return f
}

func (f field) String() string {
	s := f.base
	if f.i >= 0 {
		s += "[" + strconv.Itoa(f.i) + "]"
	}
	for _, p := range [...]string{f.sub, f.leaf} {
		if p != "" {
			s += "." + p
		}
	}
	return s
}

// Encoding: the in-memory state as a document.

// ringsView is a tracker's rings as slices, whichever layout they come
// from (the in-memory tracker, or a format 1 file).
type ringsView struct {
	width, head int64
	slots       []slot
	dayHead     int64
	day         []uint16
	failEnd     []int64
	failGen     []uint32
	failPos     int
	recent      []failRecord
	recPos      int
	callEnd     []int64
	callDur     []int64
	callFailed  []bool
	callPos     int

	consec, total, ignored int64
}

// view returns t's rings as slices.
func (t *tracker) view() ringsView {
	v := ringsView{
		width: t.Win.Width, head: t.Win.Head, slots: t.Win.Slots[:],
		dayHead: t.Day.Head, day: t.Day.Slots[:],
		failEnd: t.FailEnd[:], failGen: t.FailGen[:], failPos: int(t.FailPos),
		recent: t.Recent[:], recPos: int(t.RecPos),
		callEnd: t.CallEnd[:], callDur: t.CallDur[:], callFailed: make([]bool, len(t.CallEnd)), callPos: int(t.CallPos),
		consec: int64(t.Consec), total: t.Total, ignored: t.Ignored,
	}
	for i := range v.callFailed {
		v.callFailed[i] = t.CallFail&(1<<i) != 0
	}
	return v
}

// doc returns st as a format 2 document. A negative duration (from a
// clock that stepped back) is stored as 0, and a cooldown or open circuit
// that lasts beyond the last storable time as lasting until then.
func (st *agentState) doc() (stateDoc, error) {
	d := stateDoc{
		Format:     stateFormatV2,
		AgentID:    st.AgentID,
		AgentIDB64: base64.StdEncoding.EncodeToString([]byte(st.AgentID)),
		Config:     st.Config,
		History:    st.History,
		MaxVersion: int64(st.MaxVersion),
		Generation: int64(min(st.Gen, math.MaxInt64)),
		Verifying:  st.Verifying,
		Verify:     countsToDoc(st.Verify, true),
		Control:    countsToDoc(st.Control, true),
		Changes:    st.Changes,
		Threshold:  st.Manual,
		Critical:   st.Critical,
		Rejected:   st.Rejected,
		Proposals:  st.Proposals,
	}
	var err error
	if d.CooldownUntil, err = optTimeToDoc(path("cooldown_until"), min(st.CooldownUntil, maxNanos-1)); err != nil {
		return d, err
	}
	if d.CircuitOpenUntil, err = optTimeToDoc(path("circuit_open_until"), min(st.CircuitOpenUntil, maxNanos-1)); err != nil {
		return d, err
	}
	if d.Calls, err = callsToDoc(st.Tracker.view(), true, st.clusterName); err != nil {
		return d, err
	}
	for i := range st.Clusters {
		c := &st.Clusters[i]
		cd, err := clusterToDoc(elem("clusters", i), c.ID, c.Sig, c.Class, c.Total, c.First, c.Last, c.Examples, c.Width, c.Head, c.Slots[:])
		if err != nil {
			return d, err
		}
		d.Clusters = append(d.Clusters, cd)
	}
	return d, nil
}

// clusterName names the cluster whose ID has the low 32 bits lo: its
// whole ID when it is kept, else the 8 hex digits known ("" for 0).
func (st *agentState) clusterName(lo uint32) string {
	if c := st.clusterOf(lo); c != nil {
		return formatClusterID(c.ID)
	}
	if lo == 0 {
		return ""
	}
	return formatClusterID(uint64(lo))[8:]
}

// nonNeg returns d, or 0 for a negative d when clamp is set.
func nonNeg(d int64, clamp bool) int64 {
	if clamp {
		return max(d, 0)
	}
	return d
}

func countsToDoc(c counts, clamp bool) countsDoc {
	return countsDoc{Calls: int64(c.Calls), Failures: int64(c.Failures), LatencyNS: nonNeg(c.Latency, clamp), ConsecutiveFailures: int64(c.Consec)}
}

// timeToDoc returns Unix nanoseconds n as a UTC time. Only times from
// 1970 to before 2^62 ns later can be stored.
func timeToDoc(f field, n int64) (time.Time, error) {
	if n < 0 || n >= maxNanos {
		return time.Time{}, fmt.Errorf("%s: %d ns since 1970 out of range [0, %d)", f, n, int64(maxNanos))
	}
	return time.Unix(0, n).UTC(), nil
}

// optTimeToDoc is timeToDoc with 0 for none (the zero time.Time, which is
// not written).
func optTimeToDoc(f field, n int64) (time.Time, error) {
	if n == 0 {
		return time.Time{}, nil
	}
	return timeToDoc(f, n)
}

// bucketsToDoc calls emit with the start and content of each non-empty
// bucket of a ring of time buckets (bucket i at slots[i%len(slots)], head
// the newest), oldest first, and returns the start of the newest.
func bucketsToDoc[T comparable](f field, slots []T, head, width int64, emit func(start time.Time, s T)) (time.Time, error) {
	var zero T
	n := int64(len(slots))
	if width <= 0 {
		return time.Time{}, fmt.Errorf("%s: %d out of range", f.dot("bucket_ns"), width)
	}
	if head < 0 || head > math.MaxInt64/width {
		return time.Time{}, fmt.Errorf("%s: bucket %d of %d ns out of range", f.dot("newest"), head, width)
	}
	newest, err := timeToDoc(f.dot("newest"), head*width)
	if err != nil {
		return newest, err
	}
	for idx := head - n + 1; idx <= head; idx++ {
		s := slots[((idx%n)+n)%n]
		if s == zero {
			continue
		}
		if idx < 0 {
			return newest, fmt.Errorf("%s: a bucket before 1970", f)
		}
		emit(time.Unix(0, idx*width).UTC(), s)
	}
	return newest, nil
}

// eventOrder returns the slots of a ring of n events that hold one, oldest
// first, next being the slot the next event goes to. The events must be
// the newest ones: an empty slot between two events cannot be stored.
func eventOrder(f field, n, next int, empty func(i int) bool) ([]int, error) {
	if next < 0 || next >= n {
		return nil, fmt.Errorf("%s: ring position %d out of range [0, %d)", f, next, n)
	}
	var out []int
	for k := range n {
		i := (next + k) % n
		if empty(i) {
			if len(out) > 0 {
				return nil, fmt.Errorf("%s: an empty slot between events", f)
			}
			continue
		}
		out = append(out, i)
	}
	return out, nil
}

// callsToDoc returns a tracker's rings as a document; cluster names a
// failure's cluster.
func callsToDoc(t ringsView, clamp bool, cluster func(lo uint32) string) (callsDoc, error) {
	d := callsDoc{
		Total:               t.total,
		Ignored:             t.ignored,
		ConsecutiveFailures: t.consec,
		Window:              windowDoc{BucketNS: t.width},
		Last24h:             dayDoc{BucketNS: int64(daySlot)},
		RingPos:             ringPosDoc{Failures: int64(t.failPos), FailureDetails: int64(t.recPos), Latest: int64(t.callPos)},
	}
	var err error
	d.Window.Newest, err = bucketsToDoc(path("calls.window"), t.slots, t.head, t.width, func(start time.Time, s slot) {
		d.Window.Buckets = append(d.Window.Buckets, bucketDoc{Start: start, Calls: int64(s.Calls), Failures: int64(s.Failures), LatencyNS: nonNeg(s.Latency, clamp)})
	})
	if err != nil {
		return d, err
	}
	d.Last24h.Newest, err = bucketsToDoc(path("calls.last_24h"), t.day, t.dayHead, int64(daySlot), func(start time.Time, c uint16) {
		d.Last24h.Buckets = append(d.Last24h.Buckets, dayBucketDoc{Start: start, Calls: int64(c)})
	})
	if err != nil {
		return d, err
	}
	fails, err := eventOrder(path("calls.failures"), len(t.failEnd), t.failPos, func(i int) bool { return t.failEnd[i] == 0 && t.failGen[i] == 0 })
	if err != nil {
		return d, err
	}
	details, err := eventOrder(path("calls.failures").dot("details"), len(t.recent), t.recPos, func(i int) bool { return t.recent[i] == failRecord{} })
	if err != nil {
		return d, err
	}
	if len(details) > len(fails) {
		return d, errors.New("calls.failures: more failures with details than failures")
	}
	for k, i := range fails {
		f := failureDoc{Generation: int64(t.failGen[i])}
		if f.End, err = timeToDoc(elem("calls.failures", k).dot("end"), t.failEnd[i]); err != nil {
			return d, err
		}
		if j := k - (len(fails) - len(details)); j >= 0 {
			r := t.recent[details[j]]
			if r.End != t.failEnd[i] {
				return d, fmt.Errorf("calls.failures[%d]: its details are those of another failure", k)
			}
			dur, ver, text := nonNeg(r.Dur, clamp), int64(r.Version), r.Err
			f.DurationNS, f.Version, f.Error, f.Cluster = &dur, &ver, &text, cluster(r.Cl)
		}
		d.Failures = append(d.Failures, f)
	}
	calls, err := eventOrder(path("calls.latest"), len(t.callEnd), t.callPos, func(i int) bool {
		return t.callEnd[i] == 0 && t.callDur[i] == 0 && !t.callFailed[i]
	})
	if err != nil {
		return d, err
	}
	for k, i := range calls {
		c := latestDoc{DurationNS: nonNeg(t.callDur[i], clamp), Failed: t.callFailed[i]}
		if c.End, err = timeToDoc(elem("calls.latest", k).dot("end"), t.callEnd[i]); err != nil {
			return d, err
		}
		d.Latest = append(d.Latest, c)
	}
	return d, nil
}

// clusterToDoc returns a cluster record as a document.
func clusterToDoc(f field, id uint64, sig string, class Class, total, first, last int64, examples [maxExample]string, width, head int64, slots []uint32) (clusterDoc, error) {
	d := clusterDoc{
		ID: formatClusterID(id), Signature: sig, Class: class, Total: total,
		FirstExample: examples[0], LatestExample: examples[maxExample-1],
		Window: clusterWindowDoc{BucketNS: width},
	}
	var err error
	if d.FirstSeen, err = timeToDoc(f.dot("first_seen"), first); err != nil {
		return d, err
	}
	if d.LastSeen, err = timeToDoc(f.dot("last_seen"), last); err != nil {
		return d, err
	}
	d.Window.Newest, err = bucketsToDoc(f.dot("window"), slots, head, width, func(start time.Time, n uint32) {
		d.Window.Buckets = append(d.Window.Buckets, clusterBucketDoc{Start: start, Failures: int64(n)})
	})
	return d, err
}

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
	return counts{
		Calls:    int(calls),
		Failures: int(failures),
		Latency:  c.num(f.dot("latency_ns"), d.LatencyNS, 0, maxNanos),
		Consec:   int(c.num(f.dot("consecutive_failures"), d.ConsecutiveFailures, 0, failures+1)),
	}
}

// ring returns the slot of the k-th of n entries, oldest first, in a ring
// of size slots whose next entry goes to slot next.
func ring(next, n, k, size int) int {
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
		v, err = parseClusterID(s)
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

// calls checks the call statistics and rebuilds the tracker.
func (c *checker) calls(d *callsDoc) tracker {
	var t tracker
	t.Total = c.num(path("calls.total"), d.Total, 0, maxCount)
	t.Ignored = c.num(path("calls.ignored"), d.Ignored, 0, maxCount)
	t.Consec = int(c.num(path("calls.consecutive_failures"), d.ConsecutiveFailures, 0, maxCount))

	w := &t.Win
	w.Width = d.Window.BucketNS
	w.Head = c.head(path("calls.window"), w.Width, minSlot, maxSlot, d.Window.Newest)
	prev, total := int64(-1), int64(0)
	for k, b := range d.Window.Buckets {
		if c.err != nil {
			return t
		}
		f := elem("calls.window.buckets", k)
		prev = c.bucketIndex(f, b.Start, w.Width, w.Head, windowSlots, prev)
		calls := c.num(f.dot("calls"), b.Calls, 0, math.MaxUint32+1)
		failures := c.num(f.dot("failures"), b.Failures, 0, calls+1)
		lat := c.num(f.dot("latency_ns"), b.LatencyNS, 0, maxNanos-total)
		total += lat
		w.Slots[prev%windowSlots] = slot{Calls: uint32(calls), Failures: uint32(failures), Latency: lat}
	}

	t.Day.Head = c.head(path("calls.last_24h"), d.Last24h.BucketNS, int64(daySlot), int64(daySlot), d.Last24h.Newest)
	prev = -1
	for k, b := range d.Last24h.Buckets {
		if c.err != nil {
			return t
		}
		f := elem("calls.last_24h.buckets", k)
		prev = c.bucketIndex(f, b.Start, int64(daySlot), t.Day.Head, daySlots, prev)
		t.Day.Slots[prev%daySlots] = uint16(c.num(f.dot("calls"), b.Calls, 0, math.MaxUint16+1))
	}

	pos := d.RingPos
	t.FailPos = uint8(c.num(path("calls.ring_pos.failures"), pos.Failures, 0, failRing))
	t.RecPos = uint8(c.num(path("calls.ring_pos.failure_details"), pos.FailureDetails, 0, recentRing))
	t.CallPos = uint8(c.num(path("calls.ring_pos.latest"), pos.Latest, 0, maxBeforeCalls))

	n := len(d.Failures)
	if n > failRing {
		c.fail("calls.failures: %d failures, at most %d", n, failRing)
	}
	firstDetailed := n
	for k := range d.Failures {
		if d.Failures[k].detailed() {
			firstDetailed = k
			break
		}
	}
	if n-firstDetailed > recentRing {
		c.fail("calls.failures: %d failures with details, at most %d", n-firstDetailed, recentRing)
	}
	maxFailVersion := min(c.maxVer, math.MaxInt32)
	for k := range d.Failures {
		if c.err != nil {
			return t
		}
		fd, f := &d.Failures[k], elem("calls.failures", k)
		end := c.time(f.dot("end"), fd.End)
		if end == 0 {
			c.fail("%s: a failure ends after 1970-01-01T00:00:00Z", f.dot("end"))
		}
		i := ring(int(t.FailPos), n, k, failRing)
		t.FailEnd[i] = end
		t.FailGen[i] = uint32(c.num(f.dot("generation"), fd.Generation, 0, math.MaxUint32+1))
		if k < firstDetailed {
			continue
		}
		if !fd.detailed() {
			c.fail("%s: no details after a failure with details", f)
			return t
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
		t.Recent[ring(int(t.RecPos), n-firstDetailed, k-firstDetailed, recentRing)] = r
	}

	n = len(d.Latest)
	if n > maxBeforeCalls {
		c.fail("calls.latest: %d calls, at most %d", n, maxBeforeCalls)
		return t
	}
	for k, l := range d.Latest {
		f := elem("calls.latest", k)
		i := ring(int(t.CallPos), n, k, maxBeforeCalls)
		t.CallEnd[i] = c.time(f.dot("end"), l.End)
		if t.CallEnd[i] == 0 && c.err == nil {
			c.fail("%s: a call ends after 1970-01-01T00:00:00Z", f.dot("end"))
		}
		t.CallDur[i] = c.num(f.dot("duration_ns"), l.DurationNS, 0, maxNanos)
		if l.Failed {
			t.CallFail |= 1 << i
		}
	}
	return t
}

// cluster checks failure cluster i and rebuilds its record.
func (c *checker) cluster(i int, d *clusterDoc) clusterRec {
	var r clusterRec
	f := elem("clusters", i)
	id, err := parseClusterID(d.ID)
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
		Format:     stateFormat,
		AgentID:    id,
		AgentIDB64: base64.StdEncoding.EncodeToString(raw),
		Config:     d.Config,
		History:    d.History,
		MaxVersion: int(c.maxVer),
		Verifying:  d.Verifying,
		Verify:     c.counts(path("verify"), d.Verify),
		Control:    c.counts(path("control"), d.Control),
		Changes:    d.Changes,
		Gen:        uint64(c.num(path("generation"), d.Generation, 0, maxCount)),
		Manual:     d.Threshold,
		Critical:   d.Critical,
		Rejected:   d.Rejected,
		Proposals:  d.Proposals,
	}
	st.ownChanges(id)
	st.CooldownUntil = c.optTime(path("cooldown_until"), d.CooldownUntil)
	st.CircuitOpenUntil = c.optTime(path("circuit_open_until"), d.CircuitOpenUntil)

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
	if len(d.Clusters) > maxClusters {
		c.fail("clusters: %d clusters, at most %d", len(d.Clusters), maxClusters)
	}
	if len(st.Proposals) > maxProposals {
		c.fail("proposals: %d proposals, at most %d", len(st.Proposals), maxProposals)
	}
	for i := range st.Proposals {
		p, f := &st.Proposals[i], elem("proposals", i)
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
	raw, err := base64.StdEncoding.DecodeString(st.AgentIDB64)
	switch {
	case err != nil:
		return fmt.Errorf("agent ID: %v", err)
	case string(raw) != id:
		return errors.New("file belongs to another agent ID")
	case st.Format != stateFormat:
		return fmt.Errorf("unknown format %d", st.Format)
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

// Format 1: the in-memory layout of before, frozen here.

// stateV1 is a format 1 state file.
type stateV1 struct {
	Format           int            `json:"format"`
	AgentID          string         `json:"agent_id"`
	AgentIDB64       string         `json:"agent_id_b64"`
	Config           Config         `json:"config"`
	History          []Config       `json:"history"`
	MaxVersion       int64          `json:"max_version"`
	Verifying        *Change        `json:"verifying"`
	Verify           countsV1       `json:"verify"`
	Control          countsV1       `json:"control"`
	Changes          []Change       `json:"changes"`
	CooldownUntil    int64          `json:"cooldown_until_ns"`
	CircuitOpenUntil int64          `json:"circuit_open_until_ns"`
	Gen              uint64         `json:"generation"`
	Manual           *thresholdJSON `json:"threshold"`
	Critical         bool           `json:"critical"`
	Rejected         []Tweak        `json:"rejected"`
	Tracker          trackerV1      `json:"tracker"`
	Clusters         []clusterV1    `json:"clusters"`
	Proposals        []Proposal     `json:"proposals"`
}

type countsV1 struct {
	Calls    int64 `json:"calls"`
	Failures int64 `json:"failures"`
	Latency  int64 `json:"latency_ns"`
	Consec   int64 `json:"consecutive"`
}

func (c countsV1) doc() countsDoc {
	return countsDoc{Calls: c.Calls, Failures: c.Failures, LatencyNS: c.Latency, ConsecutiveFailures: c.Consec}
}

type trackerV1 struct {
	Win struct {
		Width int64      `json:"width_ns"`
		Head  int64      `json:"head"`
		Slots [64]slotV1 `json:"slots"`
	} `json:"window"`
	Day struct {
		Head  int64      `json:"head"`
		Slots [96]uint16 `json:"slots"`
	} `json:"day"`
	FailEnd  [64]int64        `json:"fail_end"`
	FailGen  [64]uint32       `json:"fail_gen"`
	Recent   [16]failRecordV1 `json:"recent"`
	CallEnd  [16]int64        `json:"call_end"`
	CallDur  [16]int64        `json:"call_dur"`
	CallFail uint16           `json:"call_fail"`
	CallPos  uint8            `json:"call_pos"`
	FailPos  uint8            `json:"fail_pos"`
	RecPos   uint8            `json:"recent_pos"`
	Consec   int64            `json:"consecutive"`
	Total    int64            `json:"total"`
	Ignored  int64            `json:"ignored"`
}

type slotV1 struct {
	Calls    uint32 `json:"c"`
	Failures uint32 `json:"f"`
	Latency  int64  `json:"l"`
}

type failRecordV1 struct {
	End     int64  `json:"e"`
	Dur     int64  `json:"d"`
	Err     string `json:"err"`
	Version int32  `json:"v"`
	Cl      uint32 `json:"cl"`
}

type clusterV1 struct {
	ID       uint64    `json:"id,string"`
	Sig      string    `json:"sig"`
	Class    Class     `json:"class"`
	Total    int64     `json:"total"`
	First    int64     `json:"first"`
	Last     int64     `json:"last"`
	Examples [2]string `json:"examples"`
	Width    int64     `json:"width_ns"`
	Head     int64     `json:"head"`
	Slots    [8]uint32 `json:"slots"`
}

// doc converts a format 1 file to a format 2 document, to be checked as
// one.
func (v *stateV1) doc() (stateDoc, error) {
	d := stateDoc{
		Format:     stateFormatV1,
		AgentID:    v.AgentID,
		AgentIDB64: v.AgentIDB64,
		Config:     v.Config,
		History:    v.History,
		MaxVersion: v.MaxVersion,
		Generation: int64(min(v.Gen, math.MaxInt64)),
		Verifying:  v.Verifying,
		Verify:     v.Verify.doc(),
		Control:    v.Control.doc(),
		Changes:    v.Changes,
		Threshold:  v.Manual,
		Critical:   v.Critical,
		Rejected:   v.Rejected,
		Proposals:  v.Proposals,
	}
	var err error
	if d.CooldownUntil, err = optTimeToDoc(path("cooldown_until_ns"), v.CooldownUntil); err != nil {
		return d, err
	}
	if d.CircuitOpenUntil, err = optTimeToDoc(path("circuit_open_until_ns"), v.CircuitOpenUntil); err != nil {
		return d, err
	}
	t := &v.Tracker
	r := ringsView{
		width: t.Win.Width, head: t.Win.Head, slots: make([]slot, len(t.Win.Slots)),
		dayHead: t.Day.Head, day: t.Day.Slots[:],
		failEnd: t.FailEnd[:], failGen: t.FailGen[:], failPos: int(t.FailPos),
		recent: make([]failRecord, len(t.Recent)), recPos: int(t.RecPos),
		callEnd: t.CallEnd[:], callDur: t.CallDur[:], callFailed: make([]bool, len(t.CallEnd)), callPos: int(t.CallPos),
		consec: t.Consec, total: t.Total, ignored: t.Ignored,
	}
	for i, s := range t.Win.Slots {
		r.slots[i] = slot(s)
	}
	for i, f := range t.Recent {
		r.recent[i] = failRecord(f)
	}
	for i := range r.callFailed {
		r.callFailed[i] = t.CallFail&(1<<i) != 0
	}
	clusters := make([]clusterRec, len(v.Clusters))
	for i, c := range v.Clusters {
		clusters[i] = clusterRec{ID: c.ID}
	}
	name := (&agentState{Clusters: clusters}).clusterName
	if d.Calls, err = callsToDoc(r, false, name); err != nil {
		return d, err
	}
	for i := range v.Clusters {
		c := &v.Clusters[i]
		cd, err := clusterToDoc(elem("clusters", i), c.ID, c.Sig, c.Class, c.Total, c.First, c.Last, c.Examples, c.Width, c.Head, c.Slots[:])
		if err != nil {
			return d, err
		}
		d.Clusters = append(d.Clusters, cd)
	}
	return d, nil
}
