package selfimprove

import (
	"math"
	"slices"
	"time"
)

// qualityRec is the scores and costs booked for one config version.
type qualityRec struct {
	Version int     `json:"version"`
	Route   string  `json:"route,omitempty"`
	Scored  int64   `json:"scored,omitempty"`
	Sum     float64 `json:"score_sum,omitempty"`
	Squares float64 `json:"score_squares,omitempty"`
	// Costed counts the calls that reported a cost, CostOK the
	// successful ones among them, and Cost is their total.
	Costed int64   `json:"costed,omitempty"`
	CostOK int64   `json:"costed_successes,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// qualityBook is an agent's qualityRecs, at most maxQualityRecs, oldest
// first.
type qualityBook struct {
	Recs  []qualityRec
	Watch qualityWatch // the watch of the mean score (state_quality_watch.go)
	// Explore is the exploration of the agent's candidates (candidates.go).
	Explore exploreMark
}

// clone returns a copy of b (nil for nil).
func (b *qualityBook) clone() *qualityBook {
	if b == nil {
		return nil
	}
	return &qualityBook{Recs: slices.Clone(b.Recs), Watch: b.Watch, Explore: b.Explore}
}

// maxQualityRecs bounds the versions an agent keeps scores and costs for.
const maxQualityRecs = 16

// stats returns r's figures as a Stats's quality and cost fields.
func (r *qualityRec) stats() Stats {
	var s Stats
	r.fill(&s)
	return s
}

// fill sets s's quality and cost fields from r (nil: none).
func (r *qualityRec) fill(s *Stats) {
	if r == nil {
		return
	}
	s.Scored, s.Costed, s.Cost = int(r.Scored), int(r.Costed), r.Cost
	if r.Scored > 0 {
		n := float64(r.Scored)
		s.Quality = r.Sum / n
		s.QualitySD = math.Sqrt(max(r.Squares/n-s.Quality*s.Quality, 0))
	}
	if r.CostOK > 0 {
		s.CostPerSuccess = r.Cost / float64(r.CostOK)
	}
}

// qualityOf returns the record of version, nil when it has none.
func (s *agentState) qualityOf(version int) *qualityRec {
	if s.Quality == nil {
		return nil
	}
	for i := range s.Quality.Recs {
		if s.Quality.Recs[i].Version == version {
			return &s.Quality.Recs[i]
		}
	}
	return nil
}

// bookQuality books q, of a call that ran version on route (failed or
// not), in version's record, making one when it has none: the oldest
// record goes, but for those of the config in force and of the change
// under verification.
func (s *agentState) bookQuality(version int, route string, q quality, failed bool) {
	r := s.recordOf(version, route)
	if q.scored {
		r.Scored++
		r.Sum += q.score
		r.Squares += q.score * q.score
	}
	if q.costed {
		r.Costed++
		r.Cost += q.cost
		if !failed {
			r.CostOK++
		}
	}
}

// recordOf returns version's record, making one (for route) when it has
// none: the oldest record goes, but for those of the config in force and
// of the change under verification.
func (s *agentState) recordOf(version int, route string) *qualityRec {
	r := s.qualityOf(version)
	if r == nil {
		if s.Quality == nil {
			s.Quality = new(qualityBook)
		}
		b := s.Quality
		if len(b.Recs) >= maxQualityRecs {
			drop := 0
			for i := range b.Recs {
				if v := b.Recs[i].Version; v != s.Config.Version && (s.Verifying == nil || v != s.Verifying.From.Version) {
					drop = i
					break
				}
			}
			b.Recs = append(b.Recs[:drop], b.Recs[drop+1:]...)
		}
		b.Recs = append(b.Recs, qualityRec{Version: version, Route: route})
		r = &b.Recs[len(b.Recs)-1]
	}
	return r
}

// bookCall books the score and cost call c reported of itself, for the
// config version it ran under (and that config's route, also when the
// call fell back to another).
func (s *agentState) bookCall(c *call) {
	route := c.route
	if c.fellBack {
		_, route, _ = s.placeVersion(uint64(c.version) & (1<<idVersionBits - 1))
	}
	s.bookQuality(c.version, route, c.q, c.failed)
}

// qualityViews returns the quality and cost figures by config version and
// by route (nil when none).
func (s *agentState) qualityViews() (byVersion map[int]Stats, byRoute map[string]Stats) {
	if s.Quality == nil || len(s.Quality.Recs) == 0 {
		return nil, nil
	}
	byVersion = make(map[int]Stats, len(s.Quality.Recs))
	sums := make(map[string]qualityRec)
	for i := range s.Quality.Recs {
		r := &s.Quality.Recs[i]
		byVersion[r.Version] = r.stats()
		t := sums[r.Route]
		t.Scored, t.Sum, t.Squares = t.Scored+r.Scored, t.Sum+r.Sum, t.Squares+r.Squares
		t.Costed, t.CostOK, t.Cost = t.Costed+r.Costed, t.CostOK+r.CostOK, t.Cost+r.Cost
		sums[r.Route] = t
	}
	byRoute = make(map[string]Stats, len(sums))
	for route, t := range sums {
		byRoute[route] = t.stats()
	}
	return byVersion, byRoute
}

// placeVersion finds the config version whose low idVersionBits are low
// among those the agent keeps (in force, under verification, backed up,
// decided, scored) and returns it with its route.
func (s *agentState) placeVersion(low uint64) (version int, route string, ok bool) {
	match := func(c *Config) bool {
		if uint64(c.Version)&(1<<idVersionBits-1) == low {
			version, route, ok = c.Version, c.Route, true
		}
		return ok
	}
	if match(&s.Config) || s.Verifying != nil && (match(&s.Verifying.From) || match(&s.Verifying.To)) {
		return
	}
	for i := len(s.History) - 1; i >= 0; i-- {
		if match(&s.History[i]) {
			return
		}
	}
	for i := len(s.Changes) - 1; i >= 0; i-- {
		if match(&s.Changes[i].To) || match(&s.Changes[i].From) {
			return
		}
	}
	if s.Quality != nil {
		for _, r := range s.Quality.Recs {
			if uint64(r.Version)&(1<<idVersionBits-1) == low {
				return r.Version, r.Route, true
			}
		}
	}
	return 0, "", false
}

// judgeScored judges the change under verification after a score of
// version arrived at now, when the score bears on it.
func (s *agentState) judgeScored(version int, now time.Time, r *ruleBook, eff *effects) {
	v := s.Verifying
	if v == nil || version != v.To.Version && version != v.From.Version {
		return
	}
	s.judge(now, r, eff)
}

// addQuality adds to e's Before and After (and Control) the scores and costs
// of the versions before and under the change.
func (s *agentState) addQuality(e *Evidence) {
	v := s.Verifying
	if s.Quality == nil || v == nil {
		return
	}
	s.qualityOf(v.From.Version).fill(&e.Before)
	e.Exploring = s.explores(v)
	if s.qualityMove(v) {
		// Judged against the fall of quality it answers, not against
		// the config's whole past.
		r := s.Quality.Watch.Ref.stats()
		e.Before.Scored, e.Before.Quality, e.Before.QualitySD = r.Scored, r.Quality, r.QualitySD
	}
	s.qualityOf(v.To.Version).fill(&e.After)
	s.qualityOf(v.From.Version).fill(&e.Control)
}

// exploreDue starts, at now, an exploration of the agent's candidates
// when it is due (see Exploration). It runs after a call, or a later
// score, that booked a score or a cost.
func (s *agentState) exploreDue(now time.Time, r *ruleBook, eff *effects) {
	x := &r.explore
	if !(x.Share > 0) || s.Verifying != nil || s.analyzing || eff.analysis != nil || s.Quality == nil || r.proposeOnly(s) {
		return
	}
	m := &s.Quality.Explore
	if m.Version != 0 {
		s.explored(x)
	}
	n := now.UnixNano()
	if s.Tracker.Total < m.Next || n < s.CooldownUntil || n < s.Quality.Watch.Until || s.CircuitOpenUntil != 0 || s.Route != nil && s.Route.Hold != "" {
		return
	}
	if rec := s.qualityOf(s.Config.Version); rec == nil || rec.Scored < int64(x.MinSamples) && rec.Costed < int64(x.MinSamples) {
		return
	}
	if len(r.cands.of(s.AgentID)) == 0 {
		return
	}
	th, prof := s.threshold(n)
	an := s.analysis(now, th, prof)
	an.Failures, an.Clusters, an.explore = nil, nil, true
	s.qualityOf(s.Config.Version).fill(&an.Stats)
	s.analyzing = true
	eff.th, eff.analysis = th, an
}

// explored counts the calls of the exploration decided since: the next
// waits for them to be at most Share of the agent's.
func (s *agentState) explored(x *Exploration) {
	m := &s.Quality.Explore
	calls := x.MinSamples
	for i := len(s.Changes) - 1; i >= 0; i-- {
		if ch := &s.Changes[i]; ch.To.Version == m.Version {
			calls = ch.After.Calls
			break
		}
	}
	m.Version, m.Next = 0, s.Tracker.Total+int64(math.Ceil(float64(calls)*(1-x.Share)/x.Share))
}

// exploreDone notes the outcome of the exploration an: the change ch it
// made, or none.
func (s *agentState) exploreDone(an *Analysis, ch *Change, r *ruleBook) {
	if !an.explore || s.Quality == nil {
		return
	}
	if ch != nil {
		s.Quality.Explore.Version = ch.To.Version
		return
	}
	x := &r.explore
	if x.Share > 0 {
		s.Quality.Explore.Next = s.Tracker.Total + int64(math.Ceil(float64(x.MinSamples)/x.Share))
	}
}

// quality is what a call reported of itself: its score and its cost.
type quality struct {
	score, cost    float64
	scored, costed bool
}

// any reports whether q holds a score or a cost.
func (q quality) any() bool { return q.scored || q.costed }
