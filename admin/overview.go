package admin

import (
	"cmp"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// OverviewAgent is an agent of GET /api/overview with its success rate
// over the last day, by quarter hour, oldest first (96 figures; -1 for a
// quarter with no calls or no sample).
type OverviewAgent struct {
	AgentSummary
	Day []float64 `json:"day"`
}

// Overview is the answer of GET /api/overview: the agents in trouble
// first (by State: trouble, watch, ok; then by the success of the calls
// under the config in force, Current.SuccessRate, lowest first; then by
// ID), a page of Limit from Offset; Total counts them all.
type Overview struct {
	Now    time.Time       `json:"now"`
	Total  int             `json:"total"`
	Agents []OverviewAgent `json:"agents"`
}

// maxOverview bounds a page of the overview.
const maxOverview = 200

// maxSummaries bounds the summaries the overview keeps of agents out of
// memory that it showed (ovEntry.sum), about 500 bytes each: past it,
// they are dropped, to be read again.
const maxSummaries = 1000

// maxStaleReads bounds the state files a read of the overview reads
// again for the sort keys that may have gone stale (see server.stale)
// when there is no background pass (Options.SampleEvery negative); the
// others wait for the next read.
const maxStaleReads = 64

// maxPassReads bounds the state files a background pass reads again
// (refreshStale): the kept summaries first, then the stale keys, the
// oldest first; the others wait for the next pass.
const maxPassReads = 10000

// passBatch is how many state files a background pass reads between two
// takes of the index.
const passBatch = 128

// lateAges is how many maxAge old a kept summary may grow, when a
// background pass keeps it, before a read of the overview reads it again
// itself (the background pass is late, or stopped with the Loop).
const lateAges = 3

// ovEntry is what the overview keeps of an agent between reads: its sort
// key (State, Current.SuccessRate, the ID) and when and how it was read: 80 bytes,
// about 120 with its place in the map and the order, and the ID.
type ovEntry struct {
	id     string
	disp   string  // the ID as shown (AgentSummary.ID) when not id, else ""
	health float64 // AgentSummary.Current.SuccessRate
	at     int64   // when the key was read, Unix ns on the handler's clock
	rev    uint32  // counts the key's reads
	read   uint32  // the ovIndex.gen of its last read
	seen   uint32  // the ovIndex.gen of the last listing that found it in memory
	listed uint32  // the ovIndex.gen of the last listing that found it
	// rank is stateRank of AgentSummary.State; loaded, that the key was read
	// while the agent was in memory; aging, that its health may move with
	// time alone (failures in its window, or a fleet's replicas); still,
	// that nothing of its summary does (no calls in its window nor in the
	// last day, a closed circuit, no fleet).
	rank                 uint8
	loaded, aging, still bool
	// sum is the summary read with the key, kept for an agent out of
	// memory that a page showed (at most maxSummaries of them).
	sum *AgentSummary
}

// shown returns the ID as the overview shows and sorts it.
func (e *ovEntry) shown() string {
	if e.disp != "" {
		return e.disp
	}
	return e.id
}

// ovIndex keeps the sort key of every agent the loop knows, so that a
// read of the overview reads no state file but those of the agents new
// to it, of those that left memory since the last read, and of its
// page's agents out of memory it keeps no summary of. It is filled at the
// first read of the overview. An agent's state changes only while it is
// in memory (a call, a decision or an operator action loads it), and
// every read of the overview reads the health of the agents in memory
// again (Loop.ViewCalls, no store read); the key of an agent out of memory
// is read from its state file when it is new, when it left memory since
// the last read, and while it is stale (see stale): by the background
// pass (refreshStale, each Options.SampleEvery), which also reads again
// the summaries kept; without one (SampleEvery negative), by the reads.
type ovIndex struct {
	mu        sync.Mutex
	by        map[string]*ovEntry
	order     []*ovEntry // by the overview's order once sorted
	unsorted  bool
	gen       uint32 // counts the listings
	evictions int64  // Metrics().Evictions at the last listing
	suspect   uint32 // keys of agents out of memory read before this gen may be stale
	fleet     bool   // the loop is in a fleet (at the last listing)
	sums      int    // the entries with a sum
	// kick asks the background loop for a pass now (nil: no background
	// loop; see wake and nudge).
	kick chan struct{}
}

// wake returns the channel on which reads ask the background loop for a
// pass now, made at its first call (the background loop's).
func (x *ovIndex) wake() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.kick == nil {
		x.kick = make(chan struct{}, 1)
	}
	return x.kick
}

// nudge asks the background loop for a pass now, with x.mu held: once,
// however many ask before it starts; nothing without a background loop.
func (x *ovIndex) nudge() {
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// ovLess orders two keys: by state, trouble first, then by the success
// under the config in force, lowest first, then by ID.
func ovLess(a, b *ovEntry) int {
	return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.health, b.health), cmp.Compare(a.shown(), b.shown()), cmp.Compare(a.id, b.id))
}

// set records the key of e read at now; it reports whether the key's
// place in the order may have changed.
func (x *ovIndex) set(e *ovEntry, health float64, rank uint8, loaded, aging bool, now time.Time) bool {
	moved := e.health != health || e.rank != rank
	e.health, e.rank, e.loaded, e.aging = health, rank, loaded, aging
	e.at, e.read = now.UnixNano(), x.gen
	e.rev++
	x.unsorted = x.unsorted || moved
	return moved
}

// setView records the key of e from o and calls, a view and its
// window's buckets read at now, and v, its summary (nil: none to keep;
// made from them when nil): an agent out of memory ages when its
// window holds failures (old successes leaving it lower its health, old
// failures raise it) or when the loop is in a fleet (the other replicas'
// calls change its statistics).
func (s *server) setView(e *ovEntry, o *selfimprove.AgentView, calls []selfimprove.CallBucket, v *AgentSummary, now time.Time) bool {
	x := &s.ov
	keep := v != nil
	if v == nil {
		sum := s.summary(o, calls)
		v = &sum
	}
	if !o.Loaded && v.calls == nil {
		v.calls = slices.Clone(before(calls, o)) // kept with the summary, for the day
	}
	moved := x.set(e, v.Current.SuccessRate, uint8(stateRank(v.State)), o.Loaded, o.Stats.Failures > 0 || x.fleet, now)
	e.still = o.Stats.Calls == 0 && o.Stats.CallsPerDay == 0 && o.Circuit == selfimprove.CircuitClosed && !x.fleet
	switch {
	case o.Loaded:
		x.keep(e, nil)
	case keep || e.sum != nil:
		x.keep(e, v)
	}
	return moved
}

// keep keeps v as e's summary (nil: none), within maxSummaries.
func (x *ovIndex) keep(e *ovEntry, v *AgentSummary) {
	if e.sum != nil {
		x.sums--
	}
	if v != nil && x.sums >= maxSummaries {
		for _, o := range x.by {
			o.sum = nil
		}
		x.sums = 0
	}
	if e.sum = v; v != nil {
		x.sums++
	}
}

// remove forgets e, an agent the loop no longer knows.
func (x *ovIndex) remove(e *ovEntry) {
	if x.by[e.id] == e {
		x.keep(e, nil)
		delete(x.by, e.id)
		x.unsorted = true
	}
}

// sort puts the order back in order, when a key moved.
func (x *ovIndex) sort() {
	if !x.unsorted && len(x.order) == len(x.by) {
		return
	}
	x.order = x.order[:0]
	for _, e := range x.by {
		x.order = append(x.order, e)
	}
	slices.SortFunc(x.order, ovLess)
	x.unsorted = false
}

// maxAge is how old the key of an aging agent out of memory may grow
// before it is read again: Options.SampleEvery, a minute when it is
// negative.
func (s *server) maxAge() time.Duration {
	if s.o.SampleEvery > 0 {
		return s.o.SampleEvery
	}
	return time.Minute
}

// background reports that a background pass keeps the index fresh
// (refreshStale, each Options.SampleEvery), so that reads of the overview
// read no stale key and no kept summary themselves.
func (s *server) background() bool { return s.o.SampleEvery > 0 }

// stale reports that the key of e, an agent out of memory, may no longer
// be its state's: its health moves with time alone and the key is age
// old, or agents left memory unseen since it was read.
func (s *server) stale(e *ovEntry, now time.Time, age time.Duration) bool {
	return e.aging && now.UnixNano()-e.at >= int64(age) || e.read < s.ov.suspect
}

// refreshKeys brings the keys up to date for a read of the overview at
// now, with s.ov.mu held: the agents in memory, those new to the index,
// those that left memory, and, without a background pass, up to
// maxStaleReads stale ones (with one, a pass starts at once when agents
// left memory unseen).
func (s *server) refreshKeys(now time.Time) {
	x := &s.ov
	if x.by == nil {
		x.by = map[string]*ovEntry{}
	}
	x.gen++
	g := x.gen
	m := s.l.Metrics()
	x.fleet = m.FleetReplica != ""
	var read, stale []*ovEntry
	buf := make([]selfimprove.CallBucket, 0, 64)
	for v := range s.l.Views() {
		e := x.by[v.AgentID]
		if e == nil {
			e = x.add(v.AgentID)
			read = append(read, e)
		} else if o, calls, ok := s.l.ViewCalls(v.AgentID, buf[:0]); ok {
			buf = calls
			sum := s.summary(&o, calls)
			x.set(e, sum.Current.SuccessRate, uint8(stateRank(sum.State)), true, false, now)
			x.keep(e, nil)
		}
		e.seen = g
	}
	left := 0 // the agents that left memory since the last listing, known
	for id := range s.agentIDs(len(x.by)) {
		e := x.by[id]
		switch {
		case e == nil:
			e = x.add(id)
			read = append(read, e)
			left++ // made and evicted since, or, at the first listing, stored
		case e.seen == g:
		case e.loaded:
			left++
			read = append(read, e)
		}
		e.listed = g
	}
	if g > 1 && m.Evictions-x.evictions > int64(left) {
		x.suspect = g // agents were loaded and evicted between two reads, unseen
		x.nudge()
	}
	x.evictions = m.Evictions
	bg := s.background()
	for _, e := range x.by {
		switch {
		case e.listed != g:
			x.remove(e)
		case !bg && e.seen != g && !e.loaded && e.read != 0 && s.stale(e, now, s.maxAge()):
			stale = append(stale, e)
		}
	}
	slices.SortFunc(stale, func(a, b *ovEntry) int { return cmp.Or(cmp.Compare(a.read, b.read), cmp.Compare(a.at, b.at)) })
	read = append(read, stale[:min(len(stale), maxStaleReads)]...)
	for _, e := range read {
		if o, calls, ok := s.l.ViewCalls(e.id, buf[:0]); ok {
			buf = calls
			s.setView(e, &o, calls, nil, now)
		} else {
			x.remove(e)
		}
	}
	x.sort()
}

// agentIDs yields the IDs of every agent the loop knows (Loop.AgentsFrom,
// from the store's index), about n of them.
func (s *server) agentIDs(n int) iter.Seq[string] {
	return func(yield func(string) bool) {
		batch := n + 64
		for from := ""; ; {
			ids := s.l.AgentsFrom(from, batch)
			for _, id := range ids {
				if !yield(id) {
					return
				}
			}
			if len(ids) < batch {
				return
			}
			from, batch = ids[len(ids)-1]+"\x00", 4*batch
		}
	}
}

// add makes the entry of id, not yet read.
func (x *ovIndex) add(id string) *ovEntry {
	e := &ovEntry{id: id}
	if d := strings.ToValidUTF8(id, "\uFFFD"); d != id {
		e.disp = d
	}
	x.by[id], x.unsorted = e, true
	return e
}

// ovJob is a state file a background pass reads again: its entry and
// the entry's rev, whether it keeps a summary, when it was read.
type ovJob struct {
	e     *ovEntry
	rev   uint32
	shown bool
	read  uint32
	at    int64
}

// refreshStale is the background pass, each Options.SampleEvery once the
// overview was read, and at once when a read asks (nudge): it reads
// again the keys of the stale agents out of memory and the summaries kept
// of agents out of memory, those half maxAge old, so that none grows
// maxAge old between two passes; at most maxPassReads of them, the
// summaries first, then the oldest; without holding the index while it
// reads the store.
func (s *server) refreshStale() {
	jobs := s.staleJobs(s.o.Now())
	for len(jobs) > 0 {
		n := min(len(jobs), passBatch)
		s.applyJobs(jobs[:n])
		jobs = jobs[n:]
	}
}

// staleJobs returns what a background pass at now reads, in order.
func (s *server) staleJobs(now time.Time) []ovJob {
	x := &s.ov
	half := s.maxAge() / 2
	var jobs []ovJob
	x.mu.Lock()
	for _, e := range x.by {
		if e.loaded || e.read == 0 {
			continue
		}
		if e.sum != nil && !e.still && now.UnixNano()-e.at >= int64(half) || s.stale(e, now, half) {
			jobs = append(jobs, ovJob{e, e.rev, e.sum != nil, e.read, e.at})
		}
	}
	x.mu.Unlock()
	slices.SortFunc(jobs, func(a, b ovJob) int {
		if a.shown != b.shown {
			if a.shown {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.read, b.read), cmp.Compare(a.at, b.at))
	})
	return jobs[:min(len(jobs), maxPassReads)]
}

// applyJobs reads the states of jobs, then records them in the index
// (their keys, and the summaries kept), but those read again meanwhile
// or gone.
func (s *server) applyJobs(jobs []ovJob) {
	x := &s.ov
	now := s.o.Now()
	views := make([]selfimprove.AgentView, len(jobs))
	calls := make([][]selfimprove.CallBucket, len(jobs))
	found := make([]bool, len(jobs))
	for i, j := range jobs {
		views[i], calls[i], found[i] = s.l.ViewCalls(j.e.id, nil)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, j := range jobs {
		if found[i] && j.e.rev == j.rev && x.by[j.e.id] == j.e {
			s.setView(j.e, &views[i], calls[i], nil, now)
		}
	}
	x.sort()
}

// usable reports that the summary kept of e, an agent out of memory, may
// be shown at now: time does not change it, or it is younger than maxAge;
// with a background pass, younger than lateAges maxAge, and a pass is
// asked for at once when it is maxAge old.
func (s *server) usable(e *ovEntry, now time.Time) bool {
	age := now.UnixNano() - e.at
	switch {
	case e.still || age < int64(s.maxAge()):
		return true
	case !s.background():
		return false
	}
	s.ov.nudge()
	return age < int64(lateAges*s.maxAge())
}

// ovRow is an agent of a page of the overview: its key, read with its
// summary.
type ovRow struct {
	key ovEntry
	AgentSummary
}

// overviewPage returns the number of agents and the page of n from off,
// at now: the agents in memory read afresh, those out of memory from the
// summary kept (see usable), else read. Reading them may move their keys:
// the page is then taken again, up to three times, and kept in the order
// of the keys read.
func (s *server) overviewPage(now time.Time, off, n int) (int, []ovRow) {
	x := &s.ov
	x.mu.Lock()
	defer x.mu.Unlock()
	s.refreshKeys(now)
	got := map[string]AgentSummary{}
	var page []*ovEntry
	for try := 0; ; try++ {
		lo := min(off, len(x.order)) // an offset past the end: an empty page
		page = slices.Clone(x.order[lo : lo+min(n, len(x.order)-lo)])
		moved := false
		for _, e := range page {
			if _, ok := got[e.id]; ok {
				continue
			}
			if v := e.sum; v != nil && !e.loaded && s.usable(e, now) {
				got[e.id] = *v // out of memory since it was read: only time moved
				continue
			}
			o, calls, ok := s.l.ViewCalls(e.id, nil)
			if !ok {
				x.remove(e)
				moved = true
				continue
			}
			v := s.summary(&o, calls)
			v.calls = before(calls, &o)
			got[e.id] = v
			moved = s.setView(e, &o, calls, &v, now) || moved
		}
		x.sort()
		if !moved || try == 2 {
			break
		}
	}
	out := make([]ovRow, 0, len(page))
	for _, e := range page {
		if v, ok := got[e.id]; ok && x.by[e.id] == e {
			out = append(out, ovRow{ovEntry{id: e.id, disp: e.disp, health: v.Current.SuccessRate, rank: uint8(stateRank(v.State))}, v})
		}
	}
	slices.SortFunc(out, func(a, b ovRow) int { return ovLess(&a.key, &b.key) })
	return len(x.order), out
}

// overview serves GET /api/overview.
func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, off := 60, 0
	if v := q.Get("limit"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 || x > maxOverview {
			s.fail(w, bad("limit", "limit must be a number in 1..%d", maxOverview))
			return
		}
		n = x
	}
	if v := q.Get("offset"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 0 {
			s.fail(w, bad("offset", "offset must be a number, 0 or more"))
			return
		}
		off = x
	}
	s.sampleAll(false)
	now := s.o.Now()
	total, page := s.overviewPage(now, off, n)
	out := Overview{Now: now.UTC(), Total: total, Agents: make([]OverviewAgent, 0, len(page))}
	head := now.UnixNano() / int64(tiers[1].width)
	s.samples.mu.Lock()
	for _, a := range page {
		day := dayRates(s.samples.agents[a.key.id], head)
		fillDay(day, head, a.calls)
		out.Agents = append(out.Agents, OverviewAgent{AgentSummary: a.AgentSummary, Day: day})
	}
	s.samples.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// dayRates returns the success rates of the last day of sr by quarter
// hour up to the slot head, oldest first; -1 for a quarter with no calls
// or no sample.
func dayRates(sr *timeline, head int64) []float64 {
	day := tiers[1]
	out := make([]float64, day.slots)
	for k := range out {
		out[k] = -1
		idx := head - int64(day.slots) + 1 + int64(k)
		if sr == nil || idx > sr.rings[1].head || idx <= sr.rings[1].head-int64(day.slots) {
			continue
		}
		p := sr.rings[1].slots[idx%int64(day.slots)]
		if p.ok+p.fail > 0 {
			out[k] = float64(p.ok) / float64(p.ok+p.fail)
		}
	}
	return out
}
