package selfimprove

import (
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The built-in strategy and the failure memory: a fix confirmed for a
// similar cluster is reused, one rolled back is avoided.

// forgets reports whether a fix decided at t is too old to avoid at now.
func (s *BuiltinStrategy) forgets(t, now time.Time) bool {
	d := s.ForgetAfter
	if d == 0 {
		d = 24 * time.Hour
	}
	return d > 0 && !now.IsZero() && t.Add(d).Before(now)
}

// minConfidence is MinConfidence with its default.
func (s *BuiltinStrategy) minConfidence() float64 {
	if s.MinConfidence > 0 {
		return s.MinConfidence
	}
	return 0.5
}

// learned returns the best fix confirmed for a similar cluster of the same
// class, applied to cur, or nil.
func (s *BuiltinStrategy) learned(a Analysis, class failure.Class, cur Config, cluster string, rejected func(Config) bool) *Tweak {
	maxTimeout, maxBackoff, maxAtt := s.caps()
	for _, m := range a.Memories {
		if m.Confidence < s.minConfidence() || m.Class != class {
			continue
		}
		for i := len(m.Fixes) - 1; i >= 0; i-- {
			f := m.Fixes[i]
			if f.State != FixConfirmed {
				continue
			}
			next, changed := cur.clone(), false
			if f.To.Timeout != f.From.Timeout && f.To.Timeout > cur.Timeout && cur.Timeout > 0 && class != failure.ClassFirstTokenTimeout && class != failure.ClassStreamStalled {
				next.Timeout, changed = min(f.To.Timeout, maxTimeout), true
			}
			if ft := min(f.To.FirstTokenTimeout, s.firstTokenCap(cur)); f.To.FirstTokenTimeout != f.From.FirstTokenTimeout && ft > cur.FirstTokenTimeout && cur.FirstTokenTimeout > 0 {
				next.FirstTokenTimeout, changed = ft, true
			}
			if f.To.attempts() != f.From.attempts() && f.To.attempts() > cur.attempts() {
				next.MaxAttempts, changed = min(f.To.attempts(), maxAtt), true
			}
			if f.To.Backoff != f.From.Backoff && f.To.Backoff > cur.Backoff {
				next.Backoff, changed = min(f.To.Backoff, maxBackoff), true
			}
			if f.To.Route != f.From.Route && f.To.Route != cur.Route && !transient(class) &&
				slices.Contains(a.Routes.ladder(), a.Routes.name(f.To.Route)) && !a.dead(a.Routes.name(f.To.Route)) {
				next.Route, changed = f.To.Route, true
			}
			if !changed || next.Equal(cur) || rejected(next) {
				continue
			}
			if _, bad := s.failedBefore(a.Memories, cur, next, a.Time); bad != nil {
				continue
			}
			return &Tweak{Config: next, Confidence: m.Confidence, Cluster: cluster, Reason: learnedReason(m, f)}
		}
	}
	return nil
}

// maxRefID caps each ID a learned reason quotes. The loop's own IDs are
// shorter (16 hex digits for a cluster, 36 characters for a change); a
// memory read back from a store may hold anything.
const maxRefID = 40

// learnedReason says which confirmed fix a learned tweak applies. It
// names the fix by its cluster and its change (or proposal), never by its
// reason: a fix learned from a fix learned from another would otherwise
// quote each reason within the next, and grow with every copy.
func learnedReason(m Memory, f Fix) string {
	ref := "change " + failure.Bound(f.ChangeID, maxRefID)
	if f.ChangeID == "" {
		ref = "proposal " + failure.Bound(f.ProposalID, maxRefID)
	}
	return fmt.Sprintf("learned: applies the fix confirmed for a similar failure (cluster %s, %s, similarity %.2f, confidence %.2f)",
		failure.Bound(m.Cluster, maxRefID), ref, m.Similarity, m.Confidence)
}

// failedBefore returns a memory and its fix, rolled back or rejected
// within ForgetAfter of now, that cur → next repeats (see repeats).
func (s *BuiltinStrategy) failedBefore(ms []Memory, cur, next Config, now time.Time) (*Memory, *Fix) {
	for i := range ms {
		m := &ms[i]
		if m.Confidence < s.minConfidence() {
			continue
		}
		for j := range m.Fixes {
			f := &m.Fixes[j]
			if (f.State == FixRolledBack || f.State == FixRejected) && repeats(cur, next, f.To) && !s.forgets(f.Time, now) {
				return m, f
			}
		}
	}
	return nil, nil
}

// transient reports whether class may pass on its own, so that a move
// off a route for it is temporary.
func transient(class failure.Class) bool {
	switch class {
	case failure.ClassOverloaded, failure.ClassTimeout, failure.ClassFirstTokenTimeout, failure.ClassStreamStalled, failure.ClassNetwork,
		failure.ClassEmptyResponse, failure.ClassRateLimit:
		return true
	}
	return false
}
