package admin

import (
	"net/http"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// The timelines' resolutions: the last hour by the minute, the last day
// by the quarter hour, the last week by two hours. Each agent keeps 240
// points of 36 bytes.
var tiers = [...]struct {
	name  string
	width time.Duration
	slots int
}{{"hour", time.Minute, 60}, {"day", 15 * time.Minute, 96}, {"week", 2 * time.Hour, 84}}

const nBuckets = 14 // len(selfimprove.LatencyBuckets()) + 1

// cum is an agent's counters since it was loaded: successes, failures
// and the latency histogram's counts and sum (ns).
type cum struct {
	ok, fail uint64
	lat      [nBuckets]uint64
	sum      int64
	q        qcum // the sum of the timeline's qualityIncs
}

// less reports that c counts fewer calls than b: the agent was loaded
// again and its counters started from zero.
func (c *cum) less(b *cum) bool { return c.ok < b.ok || c.fail < b.fail }

// point is one slot of a timeline: the calls that ended in it, their
// latency quantiles, the config version in force at its last sample
// (0: the slot was never sampled), the scores and costs booked in it:
// their count and mean, the calls with a cost and their cost per
// success (NaN: none of them succeeded).
type point struct {
	ok, fail       uint32
	p50, p95       uint32 // µs
	version        int32
	scored, costed uint32
	quality, cps   float32
}

// ring is one resolution of an agent's timeline: slot i (time/width) at
// slots[i%len(slots)], head the newest; base is the counters at the
// start of the head slot.
type ring struct {
	head  int64
	base  cum
	slots []point
}

// timeline is an agent's timeline; qv is the config version in force at
// the last sample of quality and cost figures, qraw its counters then,
// qmax the highest version sampled, qon that the agent has scores or
// costs (see qualityInc).
type timeline struct {
	last      cum
	has       bool
	rings     [len(tiers)]ring
	qv, qmax  int
	qraw      qcum
	qhas, qon bool
}

// sampler keeps the agents' timelines, sampled from their counters.
type sampler struct {
	mu       sync.Mutex
	agents   map[string]*timeline
	lastFull time.Time // the last sample of every agent
	max      int
	hist     map[string]struct{} // agents with a timeline and history (see admit)
}

// add records the sample c, at version, taken at now, with q, the scores
// and costs booked since the last sample.
func (s *timeline) add(now time.Time, c *cum, version int, q qcum) {
	if s.has && c.less(&s.last) {
		s.last = cum{}
		for i := range s.rings {
			s.rings[i].base = cum{}
		}
	}
	c.q = s.last.q.plus(q)
	for i, t := range tiers {
		r := &s.rings[i]
		if r.slots == nil {
			r.slots = make([]point, t.slots)
		}
		idx := now.UnixNano() / int64(t.width)
		switch {
		case !s.has: // the calls before the first sample count in its slot
			r.head, r.base = idx, cum{}
		case idx < r.head:
			continue // the clock went back
		case idx > r.head:
			advanceRing(r.slots, &r.head, idx)
			r.base = s.last
		}
		d := cum{ok: c.ok - r.base.ok, fail: c.fail - r.base.fail}
		h := selfimprove.Histogram{Bounds: selfimprove.LatencyBuckets(), Counts: make([]uint64, nBuckets)}
		for k := range c.lat {
			h.Counts[k] = c.lat[k] - min(c.lat[k], r.base.lat[k])
			h.Count += h.Counts[k]
		}
		h.Sum = time.Duration(c.sum - min(c.sum, r.base.sum))
		p := &r.slots[idx%int64(t.slots)]
		*p = point{ok: uint32(d.ok), fail: uint32(d.fail),
			p50: uint32(quantile(h, 0.5) / time.Microsecond), p95: uint32(quantile(h, 0.95) / time.Microsecond), version: int32(max(version, 1))}
		fillQuality(p, c.q.minus(r.base.q))
	}
	s.last, s.has = *c, true
}

// advanceRing moves head forward to idx, clearing the slots it passes.
func advanceRing(slots []point, head *int64, idx int64) {
	n := int64(len(slots))
	if idx-*head >= n {
		clear(slots)
	} else {
		for i := *head + 1; i <= idx; i++ {
			slots[i%n] = point{}
		}
	}
	*head = idx
}

// sample records the counters of the agent of o at now, and its scores
// and costs when o has them (full: o is from Loop.View); the agents over
// the cap are not kept.
func (p *sampler) sample(now time.Time, o *selfimprove.AgentView, full bool) {
	c := cum{ok: uint64(o.Successes), fail: uint64(o.Failures), sum: int64(o.Latency.Sum)}
	copy(c.lat[:], o.Latency.Counts)
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.agents[o.AgentID]
	if s == nil {
		if len(p.agents) >= p.max && !p.admit(o) {
			return
		}
		s = new(timeline)
		p.agents[o.AgentID] = s
	}
	p.note(o)
	var q qcum
	if full {
		q = s.qualityInc(o)
	}
	s.add(now, &c, o.Config.Version, q)
}

// sampleAll samples every agent in memory, at most once per every on
// the handler's clock unless force.
func (s *server) sampleAll(force bool) {
	now := s.o.Now()
	s.samples.mu.Lock()
	stale := force || now.Sub(s.samples.lastFull) >= s.o.SampleEvery
	if stale {
		s.samples.lastFull = now
	}
	s.samples.mu.Unlock()
	if !stale {
		return
	}
	for o := range s.l.Views() {
		full := false
		if s.samples.wantsQuality(now, o.AgentID) {
			o, full = s.l.View(o.AgentID)
		}
		s.samples.sample(now, &o, full)
	}
}

// tick is the background work of each Options.SampleEvery: a sample of
// every agent in memory, then the overview's background pass.
func (s *server) tick() {
	s.sampleAll(true)
	s.refreshStale()
}

// sampleLoop samples every agent each Options.SampleEvery until the loop
// closes (tick), and runs the overview's background pass when a read of
// it asks (ovIndex.nudge).
func (s *server) sampleLoop() {
	tick := time.NewTicker(s.o.SampleEvery)
	defer tick.Stop()
	kick := s.ov.wake()
	for {
		sub := s.l.Subscribe("", 256)
		for open := true; open; {
			select {
			case <-tick.C:
				s.tick()
			case <-kick:
				s.refreshStale()
			case ev, ok := <-sub.C:
				open = ok
				if ok && ev.AgentID != "" && ev.Change != nil { // a version begins or ends: a point there
					if o, found := s.l.View(ev.AgentID); found {
						s.samples.sample(s.o.Now(), &o, true)
					}
				}
			}
		}
		if sub.Err() != selfimprove.ErrSubscriberBehind {
			return
		}
	}
}

// SeriesPoint is one point of an agent's timeline: the calls that ended
// in the slot starting at T, their success rate and latency quantiles
// (interpolated in the latency histogram's buckets), and the config
// version in force at the slot's last sample.
//
// Scored is the scores booked in the slot for the config version in
// force (by Loop.AddScore or Loop.Score, in the slot they were given,
// not that of their call; docs/quality.md) and Quality their mean, not
// the version's running mean; Costed is the calls with a cost booked in
// the slot, and CostPerSuccess their total cost over the successful ones
// among them (nil when none succeeded). All four are absent from the
// JSON when zero (nil).
type SeriesPoint struct {
	T              time.Time     `json:"t"`
	Calls          int           `json:"calls"`
	Failures       int           `json:"failures"`
	SuccessRate    float64       `json:"success_rate"`
	P50            time.Duration `json:"p50_ns"`
	P95            time.Duration `json:"p95_ns"`
	Version        int           `json:"version"`
	Scored         int           `json:"scored,omitempty"`
	Quality        float64       `json:"quality,omitempty"`
	Costed         int           `json:"costed,omitempty"`
	CostPerSuccess *float64      `json:"cost_per_success,omitempty"`
	// Stored marks a point read from what the loop keeps of the agent's
	// calls (its analysis window's buckets, Loop.ViewCalls) for a time
	// the handler sampled nothing: Width is then the bucket's width (a
	// sixty-fourth of the window), Mean the calls' mean latency, and P50
	// and P95 are 0 (the loop keeps no quantiles); Version is the one in
	// force at the bucket's middle, by the agent's changes.
	Stored bool          `json:"stored,omitempty"`
	Width  time.Duration `json:"width_ns,omitempty"`
	Mean   time.Duration `json:"mean_ns,omitempty"`
}

// Series is the answer of GET /api/agents/{agent}/series: the agent's
// timeline over Range ("hour", "day" or "week") up to Now, in slots of
// Step, oldest first: the slots the handler sampled (each agent every
// Options.SampleEvery, at each change and at each read of its series),
// and, where it sampled none, the buckets of the agent's analysis window
// that the loop keeps (SeriesPoint.Stored), so that the calls made before
// the handler started show.
type Series struct {
	Range  string        `json:"range"`
	Now    time.Time     `json:"now"`
	From   time.Time     `json:"from"`
	Step   time.Duration `json:"step_ns"`
	Points []SeriesPoint `json:"points"`
}

// tierOf returns the index of the named range; day when name is empty.
func tierOf(name string) (int, error) {
	if name == "" {
		name = "day"
	}
	for i, t := range tiers {
		if t.name == name {
			return i, nil
		}
	}
	return 0, bad("range", "range must be hour, day or week")
}

// points returns the sampled slots of ring i of s, oldest first.
func (s *timeline) points(i int) []SeriesPoint {
	t, r := tiers[i], &s.rings[i]
	out := []SeriesPoint{}
	for idx := r.head - int64(t.slots) + 1; idx <= r.head; idx++ {
		p := r.slots[((idx%int64(t.slots))+int64(t.slots))%int64(t.slots)]
		if p.version == 0 {
			continue
		}
		sp := SeriesPoint{T: time.Unix(0, idx*int64(t.width)).UTC(), Calls: int(p.ok + p.fail), Failures: int(p.fail), SuccessRate: 1,
			P50: time.Duration(p.p50) * time.Microsecond, P95: time.Duration(p.p95) * time.Microsecond, Version: int(p.version)}
		if sp.Calls > 0 {
			sp.SuccessRate = float64(p.ok) / float64(sp.Calls)
		}
		setQuality(&sp, &p)
		out = append(out, sp)
	}
	return out
}

// getSeries serves GET /api/agents/{agent}/series.
func (s *server) getSeries(w http.ResponseWriter, r *http.Request) {
	i, err := tierOf(r.URL.Query().Get("range"))
	if err != nil {
		s.fail(w, err)
		return
	}
	o, calls, ok := s.agentCalls(w, r)
	if !ok {
		return
	}
	now := s.o.Now()
	if o.Loaded {
		s.samples.sample(now, &o, true)
	}
	t := tiers[i]
	out := Series{Range: t.name, Now: now.UTC(), From: now.Add(-time.Duration(t.slots) * t.width).UTC(), Step: t.width, Points: []SeriesPoint{}}
	s.samples.mu.Lock()
	if sr := s.samples.agents[o.AgentID]; sr != nil {
		out.Points = sr.points(i)
	}
	s.samples.mu.Unlock()
	s.mergeStored(&out, &o, calls)
	writeJSON(w, http.StatusOK, out)
}
