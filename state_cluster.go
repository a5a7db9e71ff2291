package selfimprove

// This file is the state machine's table of failure clusters: booking a
// failure in its cluster, and the clusters' views.

import (
	"github.com/self-improving-loop/selfimprove/failure"
)

// observeCluster records a failure in a's cluster table and returns the
// cluster, and whether the table did not hold it. a.mu is held; sig is
// the failure's signature (a scratch buffer), id its hash.
func (s *agentState) observeCluster(id uint64, sig []byte, class failure.Class, text string, end int64) (_ *clusterRec, fresh bool) {
	width := s.Tracker.Win.Width * (windowSlots / clusterSlots)
	for i := range s.Clusters {
		if c := &s.Clusters[i]; c.ID == id {
			c.observe(end, width, class, text)
			return c, false
		}
	}
	rec := clusterRec{ID: id, Sig: string(sig), First: end, Width: width, Head: max(end, 0) / width}
	rec.Examples[0] = text
	var c *clusterRec
	if len(s.Clusters) < maxClusters {
		s.Clusters = append(s.Clusters, rec)
		c = &s.Clusters[len(s.Clusters)-1]
	} else {
		// Replace the least recently seen.
		i := 0
		for j := range s.Clusters {
			if s.Clusters[j].Last < s.Clusters[i].Last {
				i = j
			}
		}
		s.Clusters[i] = rec
		c = &s.Clusters[i]
	}
	c.observe(end, width, class, text)
	return c, true
}

// fixesFor books in eff, for the failure memory, the outcomes of the
// decided changes made for the cluster id: a cluster new to this copy's
// table may be new to the memory too, which learns outcomes only of the
// clusters it knows (a replica that took the fleet's decision on a fault
// before it saw the fault, or a memory that evicted it).
func (s *agentState) fixesFor(id uint64, eff *effects) {
	if len(s.Changes) == 0 {
		return
	}
	name := failure.FormatClusterID(id)
	for i := range s.Changes {
		if ch := &s.Changes[i]; ch.Cluster == name && ch.State != ChangeVerifying {
			if f, ok := fixNoteOf(ch, FixOutcome(ch.State), ch.DecidedAt); ok {
				eff.learned = append(eff.learned, f)
			}
		}
	}
}

// clustersLocked returns a's clusters with failures in the window at time
// now, whose buckets are width wide (the tracker's for a transition, the
// threshold's for a getter: readWidth), most failures first.
func (s *agentState) clustersLocked(now, width int64) []Cluster {
	views := s.clusterViewsLocked(now, width)
	out := make([]Cluster, len(views))
	for i, v := range views {
		out[i] = v.Cluster
	}
	sortClusters(out)
	return out
}

// clusterViewsLocked returns a's clusters with failures in the window
// whose buckets are width wide (see clustersLocked). It changes nothing:
// each cluster is resized and moved on to now as a copy.
func (s *agentState) clusterViewsLocked(now, width int64) []clusterView {
	var out []clusterView
	for i := range s.Clusters {
		c := s.Clusters[i]
		if c.Width > 0 {
			c.resize(width * (windowSlots / clusterSlots))
		}
		if e := c.export(now); e.Count > 0 {
			out = append(out, e)
		}
	}
	return out
}

// clusterOf finds the cluster whose ID has the low 32 bits lo.
func (s *agentState) clusterOf(lo uint32) *clusterRec {
	for i := range s.Clusters {
		if uint32(s.Clusters[i].ID) == lo {
			return &s.Clusters[i]
		}
	}
	return nil
}
