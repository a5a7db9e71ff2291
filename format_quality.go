package selfimprove

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// Decoding the scores, costs and the quality watch of an agent's state.

// quality checks the scores and costs booked per config version.
func (c *checker) quality(recs []qualityRec, w *qualityWatch) *qualityBook {
	if len(recs) > maxQualityRecs {
		c.fail("quality: %d versions, at most %d", len(recs), maxQualityRecs)
		return nil
	}
	c.qualityRecs("quality", recs)
	b := &qualityBook{Recs: recs}
	if w != nil {
		c.qualityWatch(w)
		b.Watch = *w
	}
	return b
}

// qualityRecs checks the records recs of the list named name.
func (c *checker) qualityRecs(name string, recs []qualityRec) {
	for i := range recs {
		r, f := &recs[i], elem(name, i)
		c.num(f.dot("version"), int64(r.Version), 1, c.maxVer+1)
		if len(r.Route) > maxRouteLen || !utf8.ValidString(r.Route) {
			c.fail("%s: not a route", f.dot("route"))
		}
		c.scoreSums(f, r.Scored, r.Sum, r.Squares)
		costed := c.num(f.dot("costed"), r.Costed, 0, maxCount)
		c.num(f.dot("costed_successes"), r.CostOK, 0, costed+1)
		if !(r.Cost >= 0 && r.Cost <= math.MaxFloat64) {
			c.fail("%s: %v, not a cost", f.dot("cost"), r.Cost)
		}
	}
}

// answered checks the parts of the versions' records that another route
// answered, and keeps them in b: those of a version b has no record of
// are dropped (they would move nothing).
func (c *checker) answered(b *qualityBook, recs []qualityRec) {
	if len(recs) > maxQualityRecs {
		c.fail("quality_answered: %d parts, at most %d", len(recs), maxQualityRecs)
		return
	}
	c.qualityRecs("quality_answered", recs)
	if b == nil {
		return
	}
	b.Answered = slices.DeleteFunc(recs, func(a qualityRec) bool {
		return !slices.ContainsFunc(b.Recs, func(r qualityRec) bool { return r.Version == a.Version })
	})
}

// qualityWatch checks a saved watch.
func (c *checker) qualityWatch(w *qualityWatch) {
	f := path("quality_watch")
	c.num(f.dot("version"), int64(w.Version), 0, c.maxVer+1)
	c.num(f.dot("cooldown_until_ns"), w.Until, 0, maxNanos)
	if !(w.Mean >= 0 && w.Mean <= 1) {
		c.fail("%s: %v, not a mean score", f.dot("mean"), w.Mean)
	}
	if !(w.Bet >= 0 && w.Bet <= verdict.MaxDetectBet) {
		c.fail("%s: %v, not a bet", f.dot("bet"), w.Bet)
	}
	if !(w.LogW >= 0 && w.LogW <= verdict.DetectLimit(qualityWatchAlpha)) {
		c.fail("%s: %v, not the watch's log-wealth", f.dot("log_wealth"), w.LogW)
	}
	c.scoreSums(f, w.N, w.Sum, w.Squares)
	if w.N == 0 || w.LogW == 0 || w.Bet == 0 {
		// No run, or one saved before the bet (its log-wealth and bet
		// absent): the next scored call starts one afresh.
		w.N, w.Sum, w.Squares, w.LogW = 0, 0, 0, 0
	}
	r := &w.Ref
	c.num(f.dot("change_reference").dot("version"), int64(r.Version), 0, c.maxVer+1)
	c.scoreSums(f.dot("change_reference"), r.Scored, r.Sum, r.Squares)
	if len(w.RefFor) > maxRefFor {
		c.fail("%s: %d bytes, at most %d", f.dot("change_reference_proposal"), len(w.RefFor), maxRefFor)
	}
}

// maxRefFor bounds a saved qualityWatch.RefFor: a proposal's ID.
const maxRefFor = 128

// scoreSums checks n scores' sums: scores are in [0, 1], so their sum is
// in [0, n] and their squares' in [0, sum] (with room for rounding).
func (c *checker) scoreSums(f field, n int64, sum, squares float64) {
	n = c.num(f.dot("scored"), n, 0, maxCount)
	if !(sum >= 0 && sum <= float64(n)*(1+1e-9)) || !(squares >= 0 && squares <= sum*(1+1e-9)+1e-9) {
		c.fail("%s: score sums out of range", f)
	}
}

// exploration checks a saved exploration mark, and keeps it in b.
func (c *checker) exploration(b *qualityBook, x *exploreMark) {
	if x == nil || b == nil {
		return
	}
	f := path("exploration")
	c.num(f.dot("version"), int64(x.Version), 0, c.maxVer+1)
	c.num(f.dot("next_at_call"), x.Next, 0, maxCount)
	c.num(f.dot("scoreless_since_ns"), x.Quiet, 0, maxNanos)
	b.Explore = *x
}

// field names a document field in an error, such as
// "changes[3].before.calls": base, then [i] when i >= 0, then .sub and
// .leaf when set. It is formatted only when a check fails, so that
// checking a valid document allocates no names.
type field struct {
	base      string
	i         int
	sub, leaf string
}

// path is the field named base.
func path(base string) field { return field{base: base, i: -1} }

// elem is element i of the list named base.
func elem(base string, i int) field { return field{base: base, i: i} }

// dot is f's member name.
func (f field) dot(name string) field {
	switch {
	case f.leaf == "":
	case f.sub == "":
		f.sub = f.leaf
	default:
		f.sub += "." + f.leaf
	}
	f.leaf = name
	return f
}

func (f field) String() string {
	s := f.base
	if f.i >= 0 {
		s += "[" + strconv.Itoa(f.i) + "]"
	}
	for _, p := range [...]string{f.sub, f.leaf} {
		if p != "" {
			s += "." + p
		}
	}
	return s
}
