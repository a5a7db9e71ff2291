package selfimprove

import (
	"cmp"
	"encoding/json"
	"io"
	"iter"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// View returns what the loop knows of agentID, read at once, and whether
// the loop knows the agent (in memory, or in the store before Close).
// Like the other getters it creates no agent and writes nothing.
func (l *Loop) View(agentID string) (AgentView, bool) {
	now := l.clock.Now()
	v := AgentView{AgentID: agentID}
	known := l.viewStats(agentID, func(s *agentState) {
		v.fillLocked(s, now)
		v.routesLocked(s, now, &l.rules)
	})
	if a, ok := l.agents.Load(agentID); ok && known {
		v.Loaded = true
		a.(*agent).counters(&v)
	}
	return v, known
}

// Views returns a view of each agent in memory, in no particular order,
// with only the fields read without the agent's lock (see AgentView): it
// takes no agent's lock, reads no store, and costs about a microsecond an
// agent. Each view it yields is a fresh copy. Agents only in the store
// have no counters in this process and are not listed.
func (l *Loop) Views() iter.Seq[AgentView] {
	return func(yield func(AgentView) bool) {
		now := l.clock.Now().UnixNano()
		l.agents.Range(func(_, x any) bool {
			a := x.(*agent)
			v := AgentView{AgentID: a.id, Loaded: true, Config: a.cfg.Load().Config,
				Circuit: circuitAt(a.openUntil.Load(), now)}
			a.counters(&v)
			return yield(v)
		})
	}
}

// fillLocked fills v's fields from s, the agent's state, at time now.
func (v *AgentView) fillLocked(s *agentState, now time.Time) {
	n := now.UnixNano()
	v.Config = s.Config.clone()
	t, th, prof := s.readTracker(n) // reading changes nothing of s
	v.Stats = s.statsOf(&t, n, th, prof)
	v.Versions, v.Routes = s.qualityViews()
	v.Health = t.health(n)
	v.Threshold, v.Profile = th, prof
	v.Critical, v.Manual, v.ProposeOnly = s.Critical, s.Manual != nil, s.ProposeOnly
	if s.Verifying != nil {
		ch := s.verifying()
		v.Change = &ch
	} else if k := len(s.Changes); k > 0 {
		ch := s.Changes[k-1]
		v.Change = &ch
	}
	v.Circuit = circuitAt(s.openUntil(n), n)
	for _, p := range s.Proposals {
		if p.Status == ProposalPending {
			v.Proposals++
		}
	}
	since := now.Add(-24 * time.Hour)
	count := func(c *Change) {
		if c.Reason == "set by operator" {
			return
		}
		if c.AppliedAt.After(since) {
			v.Applied++
		}
		if c.DecidedAt.After(since) {
			switch c.State {
			case ChangeConfirmed:
				v.Confirmed++
			case ChangeRolledBack:
				v.RolledBack++
			}
		}
	}
	for i := range s.Changes {
		count(&s.Changes[i])
	}
	if s.Verifying != nil {
		count(s.Verifying)
	}
}

// circuitAt is the state at time now (Unix ns) of a circuit open until
// until (0: closed).
func circuitAt(until, now int64) Circuit {
	switch {
	case until == 0:
		return CircuitClosed
	case now < until:
		return CircuitOpen
	}
	return CircuitHalfOpen
}

// routesLocked fills v's route fields and its next step from s at now.
func (v *AgentView) routesLocked(s *agentState, now time.Time, r *ruleBook) {
	n := now.UnixNano()
	if rs := s.Route; rs != nil {
		if rs.Away {
			v.Home = s.routeName(rs.Home, r)
		}
		v.Held = rs.Hold
	}
	for _, d := range s.deadList() {
		if d.Until > n {
			v.DeadRoutes = append(v.DeadRoutes, DeadRoute{Route: d.Route, Until: time.Unix(0, d.Until).UTC(), Reason: d.Why})
		}
	}
	for _, d := range r.dead.list(n) {
		if !slices.ContainsFunc(v.DeadRoutes, func(x DeadRoute) bool { return x.Route == d.Route }) {
			v.DeadRoutes = append(v.DeadRoutes, d)
		}
	}
	v.Next, v.NextAt = s.next(n, r)
}

// DeadRoutes returns the routes the Loop found dead and that are still
// dead (see ProbePolicy), by route.
func (l *Loop) DeadRoutes() []DeadRoute {
	return l.dead.list(l.clock.Now().UnixNano())
}

// Similar returns the k remembered failure clusters most similar to text
// (an error message; it is scrubbed and signed first), best first. The
// similarity is the cosine of the TF-IDF vectors of the signatures' words
// (binary term frequency, idf = ln(1 + N/df) over the N remembered
// clusters). When fewer than k clusters share a word with text, text may
// also name a failure class as keywords ("timeout", "rate limit",
// "quota"; see failure.Class): that class's clusters follow, the latest
// seen first, with Similarity 0.5 (classMatch). Each Memory carries its
// fixes and how they ended, and a Confidence that halves every
// MemoryOptions.HalfLife since the cluster was last seen; both are
// rounded to three decimals. It reads every remembered cluster: about 2 ms for
// 100,000 on a 2-core VM; failures of new clusters wait for it.
func (l *Loop) Similar(text string, k int) []Memory {
	now := l.clock.Now().UnixNano()
	out := l.mem.similar(text, k, now)
	if c := classNamed(text); c != "" && len(out) < k {
		out = append(out, l.mem.ofClass(c, k-len(out), now, out)...)
	}
	for i := range out { // figures to read, not 1.8e-9
		out[i].Similarity = math.Round(out[i].Similarity*1000) / 1000
		out[i].Confidence = min(math.Round(out[i].Confidence*1000)/1000, out[i].Similarity)
	}
	return out
}

// ExportMemory writes the whole failure memory to w as JSON, the clusters
// seen latest first: {"format":1,"memories":[...]}.
func (l *Loop) ExportMemory(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(memoryFile{Format: memoryFormat, Memories: l.mem.all()})
}

// Subscribe subscribes to the events the loop records from now on: the
// same events the Notifier gets (every kind but EventDigest), each once,
// after it was written to the store. buf bounds the events waiting in C
// (default 64 when buf <= 0, at most 65,536): when C is full as an event
// comes, the subscription ends with ErrSubscriberBehind, so that a slow
// reader never delays a call, the notifier or another reader.
//
// after resumes a stream: with the ID of an event still among the recent
// ones (WithRecentEvents), Backlog holds the events recorded after it;
// with an ID no longer among them, the recent events whose IDs sort after
// it (IDs sort by time to the millisecond). With "" Backlog is empty.
// After Close, C is closed at once and Err returns ErrClosed.
func (l *Loop) Subscribe(after string, buf int) *Subscription {
	if buf <= 0 {
		buf = defaultSubscribeBuf
	}
	buf = min(buf, maxSubscribeBuf)
	ch := make(chan Event, buf)
	s := &Subscription{C: ch, ch: ch, h: l.hub}
	h := l.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if after != "" {
		s.Backlog = eventsAfter(h.recentLocked(), after)
	}
	if h.closed {
		s.err = ErrClosed
		close(ch)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// Events returns the recent events (see WithRecentEvents) that f selects,
// oldest first. Older events are in the event log (ReadEvents).
func (l *Loop) Events(f EventFilter) []Event {
	l.hub.mu.Lock()
	evs := l.hub.recentLocked()
	l.hub.mu.Unlock()
	if f.After != "" {
		evs = eventsAfter(evs, f.After)
	}
	if f.Before != "" {
		if i := slices.IndexFunc(evs, func(e Event) bool { return e.ID == f.Before }); i >= 0 {
			evs = evs[:i]
		} else {
			evs = slices.DeleteFunc(evs, func(e Event) bool { return e.ID >= f.Before })
		}
	}
	evs = slices.DeleteFunc(evs, func(e Event) bool { return !f.Keeps(&e) })
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(evs) > limit {
		if f.After != "" {
			evs = evs[:limit]
		} else {
			evs = evs[len(evs)-limit:]
		}
	}
	return slices.Clip(evs)
}

// AgentsFrom returns at most n IDs of the agents the loop knows (those
// Agents yields), in byte order, from the first one at or after from
// (the page after an ID x starts from x+"\x00"). With a FileStore or a
// ReadOnlyStore it reads an index of the agents directory, not the state
// files, so that a page costs about the same over 50 agents or 10,000.
// After Close it returns only the agents in memory.
func (l *Loop) AgentsFrom(from string, n int) []string {
	if n <= 0 {
		return nil
	}
	// The n smallest of the agents in memory, from from on.
	var live []string
	l.agents.Range(func(k, _ any) bool {
		if id := k.(string); id >= from {
			if len(live) < n {
				live = append(live, id)
				if len(live) == n {
					slices.Sort(live)
				}
			} else if id < live[n-1] {
				i, _ := slices.BinarySearch(live, id)
				copy(live[i+1:], live[i:n-1])
				live[i] = id
			}
		}
		return true
	})
	if len(live) < n {
		slices.Sort(live)
	}
	stored := l.storedFrom(from, n)
	out := make([]string, 0, n)
	for len(out) < n && (len(live) > 0 || len(stored) > 0) {
		var id string
		switch {
		case len(stored) == 0 || len(live) > 0 && live[0] <= stored[0]:
			id, live = live[0], live[1:]
		default:
			id, stored = stored[0], stored[1:]
		}
		if len(out) == 0 || out[len(out)-1] != id {
			out = append(out, id)
		}
	}
	return out
}

// storedFrom returns at most n IDs of the store's agents, in byte order,
// from from on.
func (l *Loop) storedFrom(from string, n int) []string {
	if l.isClosed.Load() {
		return nil
	}
	var all []string
	var err error
	switch s := l.store.(type) {
	case sortedLister:
		all, err = s.sortedAgentIDs()
	case agentLister:
		err = guard("ListAgents", func() error {
			return s.ListAgents(func(id string) bool {
				if id >= from {
					all = append(all, id)
				}
				return true
			})
		})
		slices.Sort(all)
	default:
		return nil
	}
	if err != nil {
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot list the agents in the store", "error", err)
	}
	i, _ := slices.BinarySearchFunc(all, from, strings.Compare)
	out := make([]string, 0, min(n, len(all)-i))
	for _, id := range all[i:] {
		if len(out) == n {
			break
		}
		if checkAgentID(id) == nil {
			out = append(out, id)
		}
	}
	return out
}

// DailySummary returns the views of the agents in memory (see
// WithMaxAgents) that made calls or had changes in the last 24 hours,
// sorted by agent ID.
func (l *Loop) DailySummary() Summary {
	now := l.clock.Now()
	out := Summary{Time: now.UTC()}
	l.eachAgent(func(a *agent) {
		v := AgentView{AgentID: a.id, Loaded: true}
		v.fillLocked(&a.s, now)
		if v.Stats.CallsPerDay > 0 || v.Applied+v.Confirmed+v.RolledBack > 0 {
			a.counters(&v)
			out.Agents = append(out.Agents, v)
		}
	})
	slices.SortFunc(out.Agents, func(x, y AgentView) int { return cmp.Compare(x.AgentID, y.AgentID) })
	return out
}

// counters reads a's counters into v, without the lock.
func (a *agent) counters(v *AgentView) {
	t := a.tel
	v.FirstToken = t.firstTokens()
	v.Failures, v.Ignored = t.failures.Load(), t.ignored.Load()
	for {
		s := t.seq.Load()
		if s&1 == 0 {
			h := Histogram{Bounds: LatencyBuckets(), Counts: make([]uint64, len(t.buckets))}
			for i := range t.buckets {
				h.Counts[i] = t.buckets[i].Load()
			}
			h.Sum = time.Duration(t.sum.Load())
			ok := t.successes.Load()
			// The counts not yet settled.
			var pc [len(latencyBounds) + 1]uint64
			var pl int64
			a.fast.collect(&t.live, &pc, &pl, fastPeek)
			if t.seq.Load() == s {
				for i := range h.Counts {
					h.Counts[i] += pc[i]
					h.Count += h.Counts[i]
					ok += int64(pc[i])
				}
				h.Sum += time.Duration(pl)
				v.Successes, v.Latency = ok, h
				return
			}
		}
		runtime.Gosched() // a settle is moving the counts
	}
}

// Metrics returns the loop's counters.
func (l *Loop) Metrics() Metrics {
	m := l.m
	out := Metrics{
		Improvements: m.improvements.Load(), Confirmations: m.confirmations.Load(), Rollbacks: m.rollbacks.Load(),
		StrategyRuns: m.strategyRuns.Load(), StrategyErrors: m.strategyErrors.Load(),
		StrategyPanics: m.strategyPanics.Load(), StrategyTimeouts: m.strategyTimeouts.Load(),
		StoreErrors: m.storeErrors.Load(),
		Notified:    m.notified.Load(), NotifyErrors: m.notifyErrors.Load(), NotifyPanics: m.notifyPanics.Load(),
		NotifyDropped: m.notifyDropped.Load(), RejectedTweaks: m.rejectedTweaks.Load(),
		Traces: m.traces.Load(), TracesDropped: m.tracesDropped.Load(),
		Agents: m.agents.Load(), Loads: m.loads.Load(), Evictions: m.evictions.Load(),
	}
	l.replicaMetrics(&out)
	return out
}

// ViewCalls is View with the buckets of agentID's analysis window that
// hold calls, appended to dst, oldest first (at most 64, each a
// sixty-fourth of the window in force), all read at once: what the loop
// keeps of the agent's past calls (from the store for an agent not in
// memory, so that a Loop on a ReadOnlyStore shows the calls of the
// process that wrote it). It returns dst unchanged for an agent the loop
// does not know. Like View it creates no agent and writes nothing.
func (l *Loop) ViewCalls(agentID string, dst []CallBucket) (AgentView, []CallBucket, bool) {
	now := l.clock.Now()
	v := AgentView{AgentID: agentID}
	known := l.viewStats(agentID, func(s *agentState) {
		v.fillLocked(s, now)
		v.routesLocked(s, now, &l.rules)
		t, _, _ := s.readTracker(now.UnixNano()) // reading changes nothing of s
		dst = t.Win.buckets(now.UnixNano(), dst)
	})
	if a, ok := l.agents.Load(agentID); ok && known {
		v.Loaded = true
		a.(*agent).counters(&v)
	}
	return v, dst, known
}
