package selfimprove

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
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
	Streak    countsDoc `json:"streak,omitzero"`
	Changes   []Change  `json:"changes,omitempty"`

	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	// CooldownCluster is the cluster (16 hex digits) the last change
	// addressed; CooldownEarly, that a new kind of fault ended a cooldown
	// early since.
	CooldownCluster  string    `json:"cooldown_cluster,omitempty"`
	CooldownEarly    bool      `json:"cooldown_early,omitempty"`
	CircuitOpenUntil time.Time `json:"circuit_open_until,omitzero"`
	// Route is the agent's way back to its primary route, the routes it
	// found dead, and its hold (see ProbePolicy); absent when empty.
	Route *routeDoc `json:"route,omitempty"`
	// Ladder is the route ladder in force when the state was saved, for
	// readers (Loop.Routes on a ReadOnlyStore); absent with none.
	Ladder *ladderDoc `json:"ladder,omitempty"`

	Threshold *thresholdJSON `json:"threshold,omitempty"`
	Critical  bool           `json:"critical,omitempty"`
	// ProposeOnly: see Loop.SetProposeOnly; absent when false.
	ProposeOnly bool    `json:"propose_only,omitempty"`
	Rejected    []Tweak `json:"rejected,omitempty"`

	Calls     callsDoc     `json:"calls"`
	Clusters  []clusterDoc `json:"clusters,omitempty"`
	Proposals []Proposal   `json:"proposals,omitempty"`
	// Quality is the scores and costs booked per config version (see
	// docs/quality.md); absent when none.
	Quality []qualityRec `json:"quality,omitempty"`
	// QualityAnswered is the part of each version's scores and costs that
	// another route than the version's answered, by version and route
	// (state_quality.go); absent when none.
	QualityAnswered []qualityRec `json:"quality_answered,omitempty"`
	// QualityWatch is the watch of the mean score (state_quality.go).
	QualityWatch *qualityWatch `json:"quality_watch,omitempty"`
	// Exploration is the exploration of the candidates (candidates.go).
	Exploration *exploreMark `json:"exploration,omitempty"`
}

// countsDoc is the calls credited to one side of a verification.
type countsDoc struct {
	Calls               int64 `json:"calls"`
	Failures            int64 `json:"failures"`
	LatencyNS           int64 `json:"latency_ns"`
	SuccessLatencyNS    int64 `json:"success_latency_ns,omitempty"`
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	AlikeCalls          int64 `json:"alike_calls,omitempty"`
	AlikeLatencyNS      int64 `json:"alike_latency_ns,omitempty"`
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
	Outages             []outageDoc  `json:"outages,omitempty"`
}

// outageDoc is a run of at least 10 failures in a row: when its latest
// failure ended, and how many it holds.
type outageDoc struct {
	End      time.Time `json:"end"`
	Failures int64     `json:"failures"`
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
	Class         failure.Class    `json:"class"`
	Total         int64            `json:"total"`
	FirstSeen     time.Time        `json:"first_seen"`
	LastSeen      time.Time        `json:"last_seen"`
	FirstExample  string           `json:"first_example"`
	LatestExample string           `json:"latest_example"`
	Window        clusterWindowDoc `json:"window"`
	From          string           `json:"from,omitempty"`
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
func encodeState(st *agentState) ([]byte, error) { return encodeWithLadder(st, nil) }

// encodeWithLadder is encodeState, recording the ladder r (nil: none).
func encodeWithLadder(st *agentState, r *Routes) ([]byte, error) {
	d, err := st.doc()
	if err != nil {
		return nil, fmt.Errorf("selfimprove: encode agent state: %w", err)
	}
	d.Ladder = ladderOf(r)
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
	outages     []outage

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
		consec: int64(t.Consec), total: t.Total, ignored: t.Ignored, outages: t.outages(),
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
		Format:      stateFormatV2,
		AgentID:     st.AgentID,
		AgentIDB64:  base64.StdEncoding.EncodeToString([]byte(st.AgentID)),
		Config:      st.Config,
		History:     st.History,
		MaxVersion:  int64(st.MaxVersion),
		Generation:  int64(min(st.Gen, math.MaxInt64)),
		Verifying:   st.Verifying,
		Verify:      countsToDoc(st.Verify, true),
		Control:     countsToDoc(st.Control, true),
		Streak:      countsDoc{Calls: int64(st.Streak.Calls), Failures: int64(st.Streak.Failures)},
		Changes:     st.Changes,
		Threshold:   st.Manual,
		Critical:    st.Critical,
		ProposeOnly: st.ProposeOnly,
		Rejected:    st.Rejected,
		Proposals:   st.Proposals,
	}
	if st.CooldownCluster != 0 {
		d.CooldownCluster = failure.FormatClusterID(st.CooldownCluster)
	}
	d.CooldownEarly = st.CooldownEarly
	var err error
	if d.CooldownUntil, err = optTimeToDoc(path("cooldown_until"), min(st.CooldownUntil, maxNanos-1)); err != nil {
		return d, err
	}
	if d.CircuitOpenUntil, err = optTimeToDoc(path("circuit_open_until"), min(st.CircuitOpenUntil, maxNanos-1)); err != nil {
		return d, err
	}
	if d.Route, err = st.Route.doc(); err != nil {
		return d, err
	}
	if st.Quality != nil {
		d.Quality, d.QualityAnswered = st.Quality.Recs, st.Quality.Answered
		if w := st.Quality.Watch; w != (qualityWatch{}) {
			d.QualityWatch = &w
		}
		if x := st.Quality.Explore; x != (exploreMark{}) {
			d.Exploration = &x
		}
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
		cd.From = c.From
		d.Clusters = append(d.Clusters, cd)
	}
	return d, nil
}

// clusterName names the cluster whose ID has the low 32 bits lo: its
// whole ID when it is kept, else the 8 hex digits known ("" for 0).
func (st *agentState) clusterName(lo uint32) string {
	if c := st.clusterOf(lo); c != nil {
		return failure.FormatClusterID(c.ID)
	}
	if lo == 0 {
		return ""
	}
	return failure.FormatClusterID(uint64(lo))[8:]
}

// nonNeg returns d, or 0 for a negative d when clamp is set.
func nonNeg(d int64, clamp bool) int64 {
	if clamp {
		return max(d, 0)
	}
	return d
}

func countsToDoc(c counts, clamp bool) countsDoc {
	return countsDoc{Calls: int64(c.Calls), Failures: int64(c.Failures), LatencyNS: nonNeg(c.Latency, clamp),
		SuccessLatencyNS: nonNeg(c.OKLatency, clamp), ConsecutiveFailures: int64(c.Consec),
		AlikeCalls: int64(c.Alike), AlikeLatencyNS: nonNeg(c.AlikeLatency, clamp)}
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
	for k, o := range t.outages {
		od := outageDoc{Failures: int64(o.Failures)}
		if od.End, err = timeToDoc(elem("calls.outages", k).dot("end"), o.End); err != nil {
			return d, err
		}
		d.Outages = append(d.Outages, od)
	}
	return d, nil
}

// clusterToDoc returns a cluster record as a document.
func clusterToDoc(f field, id uint64, sig string, class failure.Class, total, first, last int64, examples [maxExample]string, width, head int64, slots []uint32) (clusterDoc, error) {
	d := clusterDoc{
		ID: failure.FormatClusterID(id), Signature: sig, Class: class, Total: total,
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
