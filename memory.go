package selfimprove

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Memory is a failure cluster the loop remembers across its agents, with
// the fixes tried for it and how each ended.
type Memory struct {
	// Cluster is the cluster's ID (ClusterID of Signature).
	Cluster   string `json:"cluster"`
	Signature string `json:"signature"`
	// Class is the class of the cluster's latest failure.
	Class failure.Class `json:"class"`
	// Agents are the agents the cluster was seen on, at most 8, the
	// latest last.
	Agents []string `json:"agents"`
	// Count counts its failures since FirstSeen, on every agent.
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Fixes are the changes and proposals made for the cluster, at most
	// 8, oldest first.
	Fixes []Fix `json:"fixes,omitempty"`
	// Similarity is set by Similar: the TF-IDF cosine similarity of the
	// query's signature and this one, in [0, 1]. Confidence is Similarity
	// halved for every MemoryOptions.HalfLife since LastSeen.
	Similarity float64 `json:"similarity,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
}

// Fix is a change or proposal made for a failure cluster, and how it
// ended.
type Fix struct {
	AgentID string `json:"agent_id"`
	// ChangeID or ProposalID names the change or proposal.
	ChangeID   string `json:"change_id,omitempty"`
	ProposalID string `json:"proposal_id,omitempty"`
	// From is the config the fix replaced, To the config it set.
	From Config `json:"from"`
	To   Config `json:"to"`
	// Reason is the change's or proposal's reason, at most 512 bytes:
	// the loop cuts a longer one at a rune boundary and ends it with "…".
	Reason string     `json:"reason"`
	State  FixOutcome `json:"state"`
	// Time is when the fix reached State.
	Time time.Time `json:"time"`
}

// FixOutcome is how a fix ended.
type FixOutcome string

// The outcomes.
const (
	FixVerifying  FixOutcome = "verifying"   // applied, not yet judged
	FixConfirmed  FixOutcome = "confirmed"   // kept after verification
	FixRolledBack FixOutcome = "rolled_back" // rolled back after verification
	FixSuperseded FixOutcome = "superseded"  // replaced by an operator before it was judged
	FixRejected   FixOutcome = "rejected"    // a proposal a person rejected
)

// MemoryOptions bounds the failure memory. The zero value gives the
// defaults.
type MemoryOptions struct {
	// MaxClusters is how many clusters the memory keeps. When it is full,
	// a new cluster evicts the least useful sixty-fourth: the clusters
	// seen longest ago, those with a confirmed fix counting as seen
	// HalfLife later than they were. Default 10,000; at most 1,000,000.
	MaxClusters int
	// HalfLife is the age (since a cluster was last seen) at which a
	// memory's Confidence halves. Default 7 days; at most 366 days.
	HalfLife time.Duration
}

// memEntry is a remembered cluster with its terms.
type memEntry struct {
	Memory
	id    uint64
	last  int64    // LastSeen, Unix ns
	terms []uint32 // sorted, unique
}

// memory is the loop-wide failure memory: the entries, and an inverted
// index from each term to the entries that have it. Its lock is a leaf:
// nothing is locked while it is held.
type memory struct {
	mu       sync.Mutex
	max      int
	half     time.Duration
	entries  []*memEntry // nil slots are free
	gens     []uint32    // per slot, bumped when its entry is removed
	free     []int32
	byID     map[uint64]int32
	terms    map[string]uint32
	words    []string    // per term ID
	freeT    []uint32    // term IDs no live entry has, for reuse
	df       []int32     // live entries per term
	postings [][]posting // per term; stale ones (an old generation) are skipped, and dropped when they are half
	total    int         // postings
	stale    int         // stale postings
	dirty    bool
	savedAt  int64 // Unix ns of the last save
	// scratch and touched are Similar's accumulators, one per slot.
	scratch []float64
	touched []int32
}

// posting is an entry that has a term: its slot and the slot's generation
// when it was added.
type posting struct{ slot, gen uint32 }

func newMemory(o MemoryOptions) *memory {
	if o.MaxClusters <= 0 {
		o.MaxClusters = DefaultMemoryClusters
	}
	if o.HalfLife <= 0 {
		o.HalfLife = DefaultMemoryHalfLife
	}
	return &memory{max: o.MaxClusters, half: o.HalfLife, byID: map[uint64]int32{}, terms: map[string]uint32{}}
}

// termsOf returns the sorted unique term IDs of sig, adding new terms when
// add is set; unknown terms are counted in unknown.
func (m *memory) termsOf(sig string, add bool) (ids []uint32, unknown int) {
	failure.SignatureWords(sig, func(w string) {
		id, ok := m.terms[w]
		if !ok {
			if !add {
				unknown++
				return
			}
			w = strings.Clone(w)
			if n := len(m.freeT); n > 0 {
				id, m.freeT = m.freeT[n-1], m.freeT[:n-1]
				m.words[id] = w
			} else {
				id = uint32(len(m.df))
				m.df = append(m.df, 0)
				m.postings = append(m.postings, nil)
				m.words = append(m.words, w)
			}
			m.terms[w] = id
		}
		ids = append(ids, id)
	})
	slices.Sort(ids)
	return slices.Compact(ids), unknown
}

// observe records a failure of cluster id on agent at time t (Unix ns).
// A failure of a known cluster allocates nothing.
func (m *memory) observe(agent string, id uint64, sig []byte, class failure.Class, t int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirty = true
	if i, ok := m.byID[id]; ok {
		e := m.entries[i]
		e.Count++
		e.Class = class
		if t > e.last {
			e.last = t
		}
		if n := len(e.Agents); n == 0 || e.Agents[n-1] != agent {
			if j := slices.Index(e.Agents, agent); j >= 0 {
				e.Agents = append(slices.Delete(e.Agents, j, j+1), agent)
			} else {
				e.Agents = appendBounded(e.Agents, agent, maxMemoryAgents)
			}
		}
		return
	}
	e := &memEntry{Memory: Memory{Cluster: failure.FormatClusterID(id), Signature: string(sig), Class: class,
		Agents: []string{agent}, Count: 1, FirstSeen: time.Unix(0, t).UTC()}, id: id, last: t}
	m.insert(e)
}

// insert adds e, evicting when full.
func (m *memory) insert(e *memEntry) {
	if len(m.byID) >= m.max {
		m.evict(max(m.max/64, 1))
	}
	e.terms, _ = m.termsOf(e.Signature, true)
	var i int32
	if n := len(m.free); n > 0 {
		i, m.free = m.free[n-1], m.free[:n-1]
		m.entries[i] = e
	} else {
		i = int32(len(m.entries))
		m.entries = append(m.entries, e)
		m.gens = append(m.gens, 0)
	}
	m.byID[e.id] = i
	for _, t := range e.terms {
		m.df[t]++
		m.postings[t] = append(m.postings[t], posting{uint32(i), m.gens[i]})
	}
	m.total += len(e.terms)
}

// usefulness orders entries for eviction: the time last seen, with a
// confirmed fix counting as HalfLife later.
func (m *memory) usefulness(e *memEntry) int64 {
	u := e.last
	if slices.ContainsFunc(e.Fixes, func(f Fix) bool { return f.State == FixConfirmed }) {
		u += int64(m.half)
	}
	return u
}

// evict removes about n of the least useful entries, in one pass: those
// at or below the usefulness that a sample of 256 puts n from the bottom;
// at least one, the least useful, and only that one in a memory of 256
// entries or fewer.
func (m *memory) evict(n int) {
	removed := 0
	if len(m.entries) > 256 {
		sample := make([]int64, 0, 256)
		for range 256 {
			if e := m.entries[rand.IntN(len(m.entries))]; e != nil {
				sample = append(sample, m.usefulness(e))
			}
		}
		if len(sample) > 0 {
			slices.Sort(sample)
			cut := sample[min(len(sample)-1, len(sample)*n/len(m.byID))]
			for i, e := range m.entries {
				if e != nil && m.usefulness(e) <= cut {
					m.remove(int32(i))
					removed++
				}
			}
		}
	}
	if removed == 0 {
		least := int32(-1)
		for i, e := range m.entries {
			if e != nil && (least < 0 || m.usefulness(e) < m.usefulness(m.entries[least])) {
				least = int32(i)
			}
		}
		m.remove(least)
	}
}

func (m *memory) remove(i int32) {
	e := m.entries[i]
	delete(m.byID, e.id)
	m.entries[i] = nil
	m.gens[i]++
	m.free = append(m.free, i)
	m.stale += len(e.terms)
	for _, t := range e.terms {
		if m.df[t]--; m.df[t] == 0 {
			// No live entry has the term: forget it, so that the
			// vocabulary stays bounded by the entries'.
			n := len(m.postings[t])
			m.total -= n
			m.stale -= n
			m.postings[t] = nil
			delete(m.terms, m.words[t])
			m.words[t] = ""
			m.freeT = append(m.freeT, t)
		}
	}
	if m.stale > m.total/2 {
		m.compact()
	}
}

// compact drops the stale postings.
func (m *memory) compact() {
	for t, ps := range m.postings {
		m.postings[t] = slices.DeleteFunc(ps, func(p posting) bool { return m.gens[p.slot] != p.gen })
	}
	m.total -= m.stale
	m.stale = 0
}

// addFix records a fix for cluster (a formatted cluster ID): a new one, or
// the new state of the fix with the same change or proposal ID. Its Reason
// is cut to maxReason bytes.
func (m *memory) addFix(cluster string, f Fix) {
	id, err := failure.ParseClusterID(cluster)
	if err != nil {
		return
	}
	f.Reason = freeText(f.Reason)
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.byID[id]
	if !ok {
		return
	}
	e := m.entries[i]
	m.dirty = true
	for j := range e.Fixes {
		x := &e.Fixes[j]
		if (f.ChangeID != "" && x.ChangeID == f.ChangeID) || (f.ProposalID != "" && x.ProposalID == f.ProposalID && f.ChangeID == "") {
			*x = f
			return
		}
	}
	e.Fixes = appendBounded(e.Fixes, f, maxMemoryFixes)
}

// view returns e as a Memory, its lists copied.
func (e *memEntry) view() Memory {
	v := e.Memory
	v.LastSeen = time.Unix(0, e.last).UTC()
	v.Agents = slices.Clone(e.Agents)
	v.Fixes = slices.Clone(e.Fixes)
	for i := range v.Fixes {
		v.Fixes[i].From, v.Fixes[i].To = v.Fixes[i].From.clone(), v.Fixes[i].To.clone()
	}
	return v
}

// similar returns the k entries most similar to text, best first, with
// their similarity and confidence at time now.
func (m *memory) similar(text string, k int, now int64) []Memory {
	if k <= 0 {
		return nil
	}
	sig := failure.Signature(text)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := float64(len(m.byID))
	if n == 0 {
		return nil
	}
	q, unknown := m.termsOf(sig, false)
	// idf(t) = ln(1 + N/df(t)); a term no cluster has weighs as one that a
	// single cluster has.
	idf := func(t uint32) float64 { return math.Log(1 + n/float64(max(m.df[t], 1))) }
	qw := make([]float64, len(q))
	qnorm := float64(unknown) * math.Pow(math.Log(1+n), 2)
	for i, t := range q {
		qw[i] = idf(t)
		qnorm += qw[i] * qw[i]
	}
	if qnorm == 0 || len(q) == 0 {
		return nil
	}
	type hit struct {
		i   int32
		sim float64
	}
	top := make([]hit, 0, k+1)
	// Accumulate each entry's dot product with the query over the
	// postings of the query's terms.
	if len(m.scratch) < len(m.entries) {
		m.scratch = make([]float64, len(m.entries))
	}
	m.touched = m.touched[:0]
	for a, t := range q {
		w2 := qw[a] * qw[a]
		for _, p := range m.postings[t] {
			if m.gens[p.slot] != p.gen {
				continue
			}
			if m.scratch[p.slot] == 0 {
				m.touched = append(m.touched, int32(p.slot))
			}
			m.scratch[p.slot] += w2
		}
	}
	for _, i := range m.touched {
		dot := m.scratch[i]
		m.scratch[i] = 0
		if len(top) == k && dot < top[k-1].sim*top[k-1].sim*qnorm {
			// Its norm is at least dot, so its cosine is at most
			// sqrt(dot/qnorm): too low to enter.
			continue
		}
		dnorm := 0.0
		for _, t := range m.entries[i].terms {
			w := idf(t)
			dnorm += w * w
		}
		sim := min(dot/math.Sqrt(qnorm*dnorm), 1)
		if len(top) < k || sim > top[len(top)-1].sim {
			j, _ := slices.BinarySearchFunc(top, sim, func(h hit, s float64) int { return cmp.Compare(s, h.sim) })
			top = slices.Insert(top, j, hit{i, sim})
			if len(top) > k {
				top = top[:k]
			}
		}
	}
	out := make([]Memory, len(top))
	for j, h := range top {
		e := m.entries[h.i]
		out[j] = e.view()
		out[j].Similarity = h.sim
		age := max(now-e.last, 0)
		out[j].Confidence = h.sim * math.Exp2(-float64(age)/float64(m.half))
	}
	return out
}

// memoryFile is the memory's document.
type memoryFile struct {
	Format   int      `json:"format"`
	Memories []Memory `json:"memories"`
}

// all returns every entry as a Memory, the latest seen first.
func (m *memory) all() []Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Memory, 0, len(m.byID))
	for _, e := range m.entries {
		if e != nil {
			out = append(out, e.view())
		}
	}
	slices.SortFunc(out, func(a, b Memory) int { return b.LastSeen.Compare(a.LastSeen) })
	return out
}

// encode returns the memory's document if it changed since it was last
// encoded, and if that was at least memorySaveEvery before now (always
// when closing).
func (m *memory) encode(now int64, closing bool) ([]byte, bool, error) {
	m.mu.Lock()
	due := m.dirty && (closing || m.savedAt == 0 || now-m.savedAt >= int64(memorySaveEvery))
	if due {
		m.dirty, m.savedAt = false, now
	}
	m.mu.Unlock()
	if !due {
		return nil, false, nil
	}
	data, err := json.Marshal(memoryFile{Format: memoryFormat, Memories: m.all()})
	return data, true, err
}

// load replaces the memory with a saved document.
func (m *memory) load(data []byte) error {
	var f memoryFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%w: memory: %v", ErrCorruptState, err)
	}
	if f.Format != memoryFormat {
		return fmt.Errorf("%w: memory format %d", ErrCorruptState, f.Format)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Oldest first, so that a smaller MaxClusters keeps the latest.
	slices.Reverse(f.Memories)
	for _, v := range f.Memories {
		id, err := failure.ParseClusterID(v.Cluster)
		if err != nil || !utf8.ValidString(v.Signature) {
			continue
		}
		if _, dup := m.byID[id]; dup {
			continue
		}
		v.Similarity, v.Confidence = 0, 0
		v.Agents = v.Agents[:min(len(v.Agents), maxMemoryAgents)]
		v.Fixes = v.Fixes[max(len(v.Fixes)-maxMemoryFixes, 0):]
		m.insert(&memEntry{Memory: v, id: id, last: v.LastSeen.UnixNano()})
	}
	return nil
}

// appendBounded appends v to s and drops the oldest elements beyond n.
func appendBounded[T any](s []T, v T, n int) []T {
	s = append(s, v)
	if len(s) > n {
		s = append(s[:0:0], s[len(s)-n:]...)
	}
	return s
}
