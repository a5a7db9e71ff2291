package admin

import (
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// The past the loop kept: the timeline and the overview's sparklines show
// the buckets of each agent's analysis window (Loop.ViewCalls) where the
// handler sampled nothing, so that a handler started after the calls (a
// `selfimprove serve --dir` over a state directory) shows them.

// versionAt returns the config version in force at t by changes (oldest
// first, Loop.Changes): the version of the latest one applied or rolled
// back by then; cur when none tells.
func versionAt(changes []selfimprove.Change, t time.Time, cur int) int {
	v, at := 0, time.Time{}
	set := func(when time.Time, ver int) {
		if !when.IsZero() && !when.After(t) && !when.Before(at) {
			v, at = ver, when
		}
	}
	for i := range changes {
		c := &changes[i]
		if v == 0 && c.AppliedAt.After(t) {
			v = c.From.Version // before the first change known after t
		}
		set(c.AppliedAt, c.To.Version)
		if c.State == selfimprove.ChangeRolledBack {
			set(c.DecidedAt, c.From.Version)
		}
	}
	if v == 0 {
		return max(cur, 1)
	}
	return v
}

// storedPoints returns the points of the buckets calls between from and
// now that no live point of pts (slots of step) overlaps: the success of
// their calls, their mean latency (Mean; no quantiles are kept), the
// version in force by changes, and Width, the bucket's width.
func storedPoints(pts []SeriesPoint, step time.Duration, calls []selfimprove.CallBucket, changes []selfimprove.Change, from, now time.Time, cur int) []SeriesPoint {
	var out []SeriesPoint
	for _, b := range calls {
		end := b.Start.Add(b.Width)
		if !end.After(from) || b.Start.After(now) {
			continue
		}
		if slices.ContainsFunc(pts, func(p SeriesPoint) bool {
			return p.T.Before(end) && b.Start.Before(p.T.Add(step))
		}) {
			continue
		}
		p := SeriesPoint{T: b.Start, Calls: b.Calls, Failures: b.Failures, SuccessRate: 1, Width: b.Width, Stored: true,
			Version: versionAt(changes, b.Start.Add(b.Width/2), cur)}
		if b.Calls > 0 {
			p.SuccessRate = float64(b.Calls-b.Failures) / float64(b.Calls)
			p.Mean = b.Latency / time.Duration(b.Calls)
		}
		out = append(out, p)
	}
	return out
}

// before returns the oldest of the buckets calls of o's agent, those
// that hold only calls made before this process loaded it: the handler's
// samples count the others (AgentView.Successes and Failures, since the
// agent was loaded, in the slot of its first sample).
func before(calls []selfimprove.CallBucket, o *selfimprove.AgentView) []selfimprove.CallBucket {
	k, n := len(calls), o.Successes+o.Failures
	for n > 0 && k > 0 {
		k--
		n -= int64(calls[k].Calls)
	}
	return calls[:k]
}

// mergeStored adds to out the stored points of the agent of o (calls, its
// window's buckets), in time order: those before it was loaded.
func (s *server) mergeStored(out *Series, o *selfimprove.AgentView, calls []selfimprove.CallBucket) {
	if calls = before(calls, o); len(calls) == 0 {
		return
	}
	st := storedPoints(out.Points, out.Step, calls, s.l.Changes(o.AgentID), out.From, out.Now, o.Config.Version)
	if len(st) == 0 {
		return
	}
	out.Points = append(out.Points, st...)
	slices.SortStableFunc(out.Points, func(a, b SeriesPoint) int { return a.T.Compare(b.T) })
}

// fillDay fills the quarter hours of day (dayRates: -1 where the handler
// sampled no call) that the buckets calls overlap with their success
// rate; head is the newest quarter hour's index.
func fillDay(day []float64, head int64, calls []selfimprove.CallBucket) {
	w := int64(tiers[1].width)
	first := head - int64(len(day)) + 1
	for k := range day {
		if day[k] >= 0 {
			continue
		}
		lo := (first + int64(k)) * w
		hi := lo + w
		n, ok := 0, 0
		for _, b := range calls {
			s := b.Start.UnixNano()
			if s < hi && lo < s+int64(b.Width) {
				n += b.Calls
				ok += b.Calls - b.Failures
			}
		}
		if n > 0 {
			day[k] = float64(ok) / float64(n)
		}
	}
}
