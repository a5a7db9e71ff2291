package selfimprove

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Trend says how a cluster's failures move within the analysis window.
type Trend string

// Trends. A cluster first seen less than half a window ago is new;
// otherwise its count in the newer half of the window is compared with the
// older half: at least twice as many and at least 2 more is increasing,
// at most half and at least 2 fewer is decreasing, anything else stable.
const (
	TrendNew        Trend = "new"
	TrendIncreasing Trend = "increasing"
	TrendStable     Trend = "stable"
	TrendDecreasing Trend = "decreasing"
)

// Cluster is a group of failures that share a Signature.
type Cluster struct {
	// ID is stable across processes: ClusterID(Signature).
	ID        string `json:"id"`
	Signature string `json:"signature"`
	// Class is the class of the cluster's latest failure, and RootCause
	// its root cause.
	Class     failure.Class     `json:"class"`
	RootCause failure.RootCause `json:"root_cause"`
	// Count is the failures in the analysis window (to within an eighth
	// of it); Total counts every failure since the cluster was first
	// seen.
	Count int   `json:"count"`
	Total int64 `json:"total"`
	// FirstSeen and LastSeen are the times of its first and latest
	// failures.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Examples are the first and the latest messages (scrubbed, up to 200
	// bytes each); one when they are the same.
	Examples []string `json:"examples"`
	Trend    Trend    `json:"trend"`
	// Recurring reports 3 or more failures in the window.
	Recurring bool `json:"recurring"`
	// Agents are the agents the cluster was seen on (AllClusters only).
	Agents []string `json:"agents,omitempty"`
	// From is the agent whose call, nested in this agent's call, failed
	// with the error the cluster's latest failure passed on (its first
	// 128 bytes). That agent owns the failure: the built-in strategy
	// leaves such a cluster to it, and the failure memory does not count
	// it for this agent (see Budget and docs/guide.md). Default empty:
	// the agent's own failure, and always in AllClusters.
	From string `json:"from,omitempty"`
}

// clusterView is a Cluster with what merging needs: the counts in the
// window's halves, and the window.
type clusterView struct {
	Cluster
	older, newer int
	window       int64
}

// SharedCause is a signature, or a class, that hit two or more agents
// within their analysis windows: a likely common cause, such as an
// upstream outage.
type SharedCause struct {
	// ClusterID and Signature name the shared cluster; both are empty
	// when only the class is shared.
	ClusterID string        `json:"cluster_id,omitempty"`
	Signature string        `json:"signature,omitempty"`
	Class     failure.Class `json:"class"`
	// Agents are the agents hit, sorted.
	Agents []string `json:"agents"`
	// LastSeen is the latest failure among them.
	LastSeen time.Time `json:"last_seen"`
}

const (
	maxClusters  = 8 // clusters kept per agent; the least recently seen goes first
	clusterSlots = 8 // time buckets of a cluster's window
	maxExample   = 2 // examples kept per cluster: the first and the latest
	maxShared    = 1024
	sharedAgents = 8 // agents remembered per shared entry
)

// clusterRec is one cluster of an agent, as kept and stored. Its counts
// live in clusterSlots buckets of Width nanoseconds (an eighth of the
// analysis window); Head is the index of the newest.
type clusterRec struct {
	ID       uint64               `json:"id,string"`
	Sig      string               `json:"sig"`
	Class    failure.Class        `json:"class"`
	Total    int64                `json:"total"`
	First    int64                `json:"first"`
	Last     int64                `json:"last"`
	Examples [maxExample]string   `json:"examples"`
	Width    int64                `json:"width_ns"`
	Head     int64                `json:"head"`
	Slots    [clusterSlots]uint32 `json:"slots"`
	From     string               `json:"from,omitempty"` // see Cluster.From
}

// observe counts a failure at time end (Unix ns) with bucket width width.
func (c *clusterRec) observe(end, width int64, class failure.Class, text string) {
	c.resize(width)
	idx := max(end, 0) / c.Width
	if idx > c.Head {
		advanceRing(c.Slots[:], &c.Head, idx)
	}
	if idx <= c.Head-clusterSlots {
		idx = c.Head
	}
	if s := &c.Slots[idx%clusterSlots]; *s < math.MaxUint32 {
		*s++
	}
	c.Total++
	c.Last = max(c.Last, end)
	c.Class = class
	c.Examples[maxExample-1] = text
}

// resize moves the counts to buckets of a new width, each into the bucket
// that holds its start.
func (c *clusterRec) resize(width int64) {
	if width == c.Width || width <= 0 {
		return
	}
	old := *c
	c.Width, c.Head, c.Slots = width, old.Head*old.Width/width, [clusterSlots]uint32{}
	for i := int64(0); i < clusterSlots && old.Head-i >= 0; i++ {
		idx := old.Head - i
		n := old.Slots[idx%clusterSlots]
		if n == 0 {
			continue
		}
		ni := idx * old.Width / width
		if ni > c.Head-clusterSlots && ni >= 0 {
			c.Slots[ni%clusterSlots] += n
		}
	}
}

// halves returns the counts in the older and newer halves of the window at
// time now.
func (c *clusterRec) halves(now int64) (older, newer int) {
	if c.Width <= 0 {
		return 0, 0
	}
	idx := max(now, 0) / c.Width
	for i := int64(0); i < clusterSlots; i++ {
		b := idx - i
		if b > c.Head || b <= c.Head-clusterSlots || b < 0 {
			continue
		}
		if i < clusterSlots/2 {
			newer += int(c.Slots[b%clusterSlots])
		} else {
			older += int(c.Slots[b%clusterSlots])
		}
	}
	return older, newer
}

// trendOf derives a cluster's trend.
func trendOf(first, now, window int64, older, newer int) Trend {
	switch {
	case now-first < window/2:
		return TrendNew
	case newer >= 2*older && newer-older >= 2:
		return TrendIncreasing
	case older >= 2*newer && older-newer >= 2:
		return TrendDecreasing
	}
	return TrendStable
}

// export describes the cluster at time now.
func (c *clusterRec) export(now int64) clusterView {
	older, newer := c.halves(now)
	window := c.Width * clusterSlots
	out := clusterView{Cluster: Cluster{
		ID:        failure.FormatClusterID(c.ID),
		Signature: c.Sig,
		Class:     c.Class,
		RootCause: c.Class.RootCause(),
		Count:     older + newer,
		Total:     c.Total,
		FirstSeen: time.Unix(0, c.First).UTC(),
		LastSeen:  time.Unix(0, c.Last).UTC(),
		Trend:     trendOf(c.First, now, window, older, newer),
		From:      c.From,
	}, older: older, newer: newer, window: window}
	out.Recurring = out.Count >= 3
	for i, e := range c.Examples {
		if e != "" && (i == 0 || e != c.Examples[0]) {
			out.Examples = append(out.Examples, e)
		}
	}
	return out
}

func sortClusters(cs []Cluster) {
	slices.SortStableFunc(cs, func(x, y Cluster) int {
		if c := cmp.Compare(y.Count, x.Count); c != 0 {
			return c
		}
		if c := y.LastSeen.Compare(x.LastSeen); c != 0 {
			return c
		}
		return cmp.Compare(x.ID, y.ID)
	})
}

// shared indexes failures by cluster and by class across agents, for
// SharedCauses. It is bounded: maxShared clusters, the classes, and
// sharedAgents agents each (the least recently hit go first).
type shared struct {
	mu        sync.Mutex
	byCluster map[uint64]*sharedEntry
	byClass   map[failure.Class]*sharedEntry
}

type sharedEntry struct {
	sig    string
	class  failure.Class
	last   int64
	agents [sharedAgents]agentSeen
}

type agentSeen struct {
	id     string
	last   int64 // Unix ns
	window int64 // the agent's analysis window, ns
}

func (e *sharedEntry) see(agentID string, end, window int64) {
	e.last = max(e.last, end)
	oldest := 0
	for i := range e.agents {
		a := &e.agents[i]
		if a.id == agentID && a.last != 0 {
			a.last, a.window = max(a.last, end), window
			return
		}
		if a.last < e.agents[oldest].last {
			oldest = i
		}
	}
	e.agents[oldest] = agentSeen{id: agentID, last: end, window: window}
}

// observe notes that agentID failed at end in cluster id (signature sig)
// of class class; sig is converted only for a cluster new to the index.
func (x *shared) observe(agentID string, id uint64, sig []byte, class failure.Class, end, window int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byCluster == nil {
		x.byCluster, x.byClass = make(map[uint64]*sharedEntry), make(map[failure.Class]*sharedEntry)
	}
	e := x.byCluster[id]
	if e == nil {
		if len(x.byCluster) >= maxShared {
			var oldK uint64
			oldT := int64(math.MaxInt64)
			for k, v := range x.byCluster {
				if v.last < oldT {
					oldK, oldT = k, v.last
				}
			}
			delete(x.byCluster, oldK)
		}
		e = &sharedEntry{sig: string(sig), class: class}
		x.byCluster[id] = e
	}
	e.class = class
	e.see(agentID, end, window)
	if class == failure.ClassOther || class == failure.ClassCanceled || class == "" {
		return
	}
	c := x.byClass[class]
	if c == nil {
		if len(x.byClass) >= 64 { // custom classes are unbounded in number
			return
		}
		c = &sharedEntry{class: class}
		x.byClass[class] = c
	}
	c.see(agentID, end, window)
}

// causes returns the shared causes at time now, involving agentID only if
// forAgent is set: clusters first, then classes, each with the most
// agents first.
func (x *shared) causes(now int64, agentID string, forAgent bool) []SharedCause {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []SharedCause
	add := func(id uint64, e *sharedEntry, byCluster bool) {
		var agents []string
		has := !forAgent
		for _, a := range e.agents {
			if a.last != 0 && a.last > now-a.window {
				agents = append(agents, a.id)
				has = has || a.id == agentID
			}
		}
		if len(agents) < 2 || !has {
			return
		}
		slices.Sort(agents)
		sc := SharedCause{Class: e.class, Agents: agents, LastSeen: time.Unix(0, e.last).UTC()}
		if byCluster {
			sc.ClusterID, sc.Signature = failure.FormatClusterID(id), e.sig
		}
		out = append(out, sc)
	}
	for id, e := range x.byCluster {
		add(id, e, true)
	}
	for _, e := range x.byClass {
		add(0, e, false)
	}
	slices.SortFunc(out, func(a, b SharedCause) int {
		if (a.ClusterID == "") != (b.ClusterID == "") {
			if a.ClusterID != "" {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(len(b.Agents), len(a.Agents)); c != 0 {
			return c
		}
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.ClusterID, b.ClusterID), cmp.Compare(a.Class, b.Class))
	})
	return out
}

// nestedNote says how many of the window's failures were passed on from
// calls nested in the agent's, and whose they are: "" when none.
func nestedNote(cs []Cluster) string {
	n, agents := 0, []string(nil)
	for _, c := range cs {
		if c.From != "" {
			n += c.Count
			if !slices.Contains(agents, c.From) {
				agents = append(agents, c.From)
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more came from nested calls of %s, left to them", n, quoteList(agents, 3))
}

// quoteList quotes the first n of names, and says how many more.
func quoteList(names []string, n int) string {
	var b strings.Builder
	for i, s := range names[:min(len(names), n)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(failure.Bound(s, 40)))
	}
	if len(names) > n {
		fmt.Fprintf(&b, " and %d more", len(names)-n)
	}
	return b.String()
}
