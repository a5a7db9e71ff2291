package selfimprove

import (
	"math"
	"slices"
	"strings"

	"github.com/self-improving-loop/selfimprove/failure"
)

// classMatch is the Similarity of a cluster that Similar returns because
// the query named its class, not for the words they share.
const classMatch = 0.5

// classNamed returns the failure class text names as keywords, if any:
// the class itself ("rate_limit", "timeout"), its words ("rate limit"),
// or a plural ("timeouts"); "" when text is not a class name.
func classNamed(text string) failure.Class {
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	if len(words) == 0 || len(words) > 3 {
		return ""
	}
	name := strings.Join(words, "_")
	for _, c := range knownClasses {
		if string(c) == name || string(c)+"s" == name {
			return c
		}
	}
	return ""
}

// knownClasses are the classes Classify returns.
var knownClasses = []failure.Class{failure.ClassRateLimit, failure.ClassTimeout, failure.ClassOverloaded,
	failure.ClassNetwork, failure.ClassAuth, failure.ClassBadRequest, failure.ClassNotFound,
	failure.ClassModelUnavailable, failure.ClassContextLength, failure.ClassEmptyResponse,
	failure.ClassContentFilter, failure.ClassBadOutput, failure.ClassToolError, failure.ClassPanic,
	failure.ClassCanceled, failure.ClassQuota, failure.ClassFirstTokenTimeout, failure.ClassStreamStalled, failure.ClassOther}

// ofClass returns up to k entries of class c not already in have, the
// latest seen first, with Similarity classMatch and their confidence at
// time now.
func (m *memory) ofClass(c failure.Class, k int, now int64, have []Memory) []Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	var hits []*memEntry
	for _, e := range m.entries {
		if e != nil && e.Class == c && !slices.ContainsFunc(have, func(h Memory) bool { return h.Cluster == e.Cluster }) {
			hits = append(hits, e)
		}
	}
	slices.SortFunc(hits, func(a, b *memEntry) int { return int(min(max(b.last-a.last, -1), 1)) })
	out := make([]Memory, 0, min(k, len(hits)))
	for _, e := range hits[:min(k, len(hits))] {
		v := e.view()
		v.Similarity = classMatch
		v.Confidence = classMatch * math.Exp2(-float64(max(now-e.last, 0))/float64(m.half))
		out = append(out, v)
	}
	return out
}
