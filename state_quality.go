package selfimprove

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
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
	Watch qualityWatch // the watch of the mean score (state_quality.go)
	// Explore is the exploration of the agent's candidates (candidates.go).
	Explore exploreMark
	// Keys are the keys of the latest scores by ID (ids.go); nil
	// until the agent is scored by ID. Not saved.
	Keys *scoreKeys
	// Answered is, per version and route, the part of a version's
	// record (booked in Recs too) that another route than the record's
	// answered: a fallback within the call, a route fitted to the
	// request, a probe of the primary. At most maxQualityRecs, oldest
	// first.
	Answered []qualityRec
}

// clone returns a copy of b (nil for nil).
func (b *qualityBook) clone() *qualityBook {
	if b == nil {
		return nil
	}
	return &qualityBook{Recs: slices.Clone(b.Recs), Watch: b.Watch, Explore: b.Explore, Answered: slices.Clone(b.Answered)}
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
	s.recordOf(version, route).book(q, failed)
}

// book adds q, of a call that failed or not, to r.
func (r *qualityRec) book(q quality, failed bool) {
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
			gone := b.Recs[drop].Version
			b.Recs = append(b.Recs[:drop], b.Recs[drop+1:]...)
			b.Answered = slices.DeleteFunc(b.Answered, func(a qualityRec) bool { return a.Version == gone })
		}
		b.Recs = append(b.Recs, qualityRec{Version: version, Route: route})
		r = &b.Recs[len(b.Recs)-1]
	}
	return r
}

// bookCall books the score and cost call c reported of itself, for the
// config version it ran under, in its record (with that config's route),
// and for the route of its last attempt, the one that answered it, when
// that is another (a fallback within the call, a route fitted to its
// request, a probe of the primary): in the book's Answered, which
// qualityViews moves to that route.
func (s *agentState) bookCall(c *call, r *ruleBook) {
	route := c.route
	if c.fellBack || c.fitted || c.homeProbe || c.earlier {
		_, route, _ = s.placeVersion(uint64(c.version) & (1<<idVersionBits - 1))
	}
	if c.earlier {
		c.route = route // its version's: it answered there
	}
	s.bookQuality(c.version, route, c.q, c.failed)
	lad, own := s.ladder(r), s.qualityOf(c.version).Route
	if c.route == own || !lad.empty() && lad.name(c.route) == lad.name(own) {
		return
	}
	b := s.Quality
	i := slices.IndexFunc(b.Answered, func(a qualityRec) bool { return a.Version == c.version && a.Route == c.route })
	if i < 0 {
		if len(b.Answered) >= maxQualityRecs {
			b.Answered = b.Answered[1:]
		}
		b.Answered, i = append(b.Answered, qualityRec{Version: c.version, Route: c.route}), len(b.Answered)
	}
	b.Answered[i].book(c.q, c.failed)
}

// qualityViews returns the quality and cost figures by config version and
// by route (nil when none): a route's are those of the calls it answered
// (a version's record, less its Answered parts, and the parts it
// answered of other versions').
func (s *agentState) qualityViews() (byVersion map[int]Stats, byRoute map[string]Stats) {
	if s.Quality == nil || len(s.Quality.Recs) == 0 {
		return nil, nil
	}
	byVersion = make(map[int]Stats, len(s.Quality.Recs))
	sums := make(map[string]qualityRec)
	add := func(route string, r *qualityRec, sign float64) {
		t := sums[route]
		n := int64(sign)
		t.Scored, t.Sum, t.Squares = t.Scored+n*r.Scored, t.Sum+sign*r.Sum, t.Squares+sign*r.Squares
		t.Costed, t.CostOK, t.Cost = t.Costed+n*r.Costed, t.CostOK+n*r.CostOK, t.Cost+sign*r.Cost
		sums[route] = t
	}
	for i := range s.Quality.Recs {
		r := &s.Quality.Recs[i]
		byVersion[r.Version] = r.stats()
		add(r.Route, r, 1)
	}
	for i := range s.Quality.Answered {
		if a := &s.Quality.Answered[i]; s.qualityOf(a.Version) != nil {
			add(s.qualityOf(a.Version).Route, a, -1)
			add(a.Route, a, 1)
		}
	}
	byRoute = make(map[string]Stats, len(sums))
	for route, t := range sums {
		// What rounding left of the parts moved is no figure.
		t.Sum, t.Squares, t.Cost = max(t.Sum, 0), max(t.Squares, 0), max(t.Cost, 0)
		if t.Scored <= 0 {
			t.Scored, t.Sum, t.Squares = 0, 0, 0
		}
		if t.Costed <= 0 {
			t.Costed, t.CostOK, t.Cost = 0, 0, 0
		}
		if t.Scored > 0 || t.Costed > 0 {
			byRoute[route] = t.stats()
		}
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
		e.Repairs = true
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
	if s.Tracker.Total < m.Next || n < s.CooldownUntil || n < s.Quality.Watch.Until || s.Quality.Watch.falling(s.Config.Version) ||
		s.CircuitOpenUntil != 0 || s.Route != nil && s.Route.Hold != "" {
		return
	}
	// Scored calls enough to judge quality, or, for an agent known to
	// score none, calls with a cost.
	if rec := s.qualityOf(s.Config.Version); rec == nil || rec.Scored < int64(x.MinSamples) &&
		(rec.Costed < int64(x.MinSamples) || !s.Quality.scoreless(noScoreCalls*int64(x.MinSamples), n)) {
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

// noScoreCalls times Exploration.MinSamples is how many calls with a
// cost, none scored, show that an agent scores none of its calls: one
// that scores 1 % of them has one scored among 1,000 but 1 time in
// 23,000 (among 100, 1 time in 3).
const noScoreCalls = 10

// scoreless reports whether b's agent is known, at now (Unix ns), to
// score none of its calls: no record holds a score, and together they
// have held at least n calls with a cost for ScoreHorizon, the time a
// late grader has to score them (it notes when that began in
// b.Explore.Quiet). A grader that scores minutes after the call is not
// taken for none.
func (b *qualityBook) scoreless(n, now int64) bool {
	var costed int64
	for i := range b.Recs {
		if b.Recs[i].Scored > 0 {
			b.Explore.Quiet = 0
			return false
		}
		costed += b.Recs[i].Costed
	}
	if costed < n {
		return false
	}
	if b.Explore.Quiet == 0 || b.Explore.Quiet > now {
		b.Explore.Quiet = now
	}
	return now-b.Explore.Quiet >= int64(ScoreHorizon)
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

// A change that raised the cost per successful call, filed for a
// person's approval (RollbackPolicy.ProposeCostRise, docs/quality.md).

// fileCostRise files ch, just rolled back for its cost alone, as a
// proposal to apply it again: a pending one with the same config is
// brought up to date instead.
func (s *agentState) fileCostRise(now time.Time, ch *Change, r *ruleBook, eff *effects) {
	cfg := ch.To.clone()
	cfg.Version = 0
	why := loopText(fmt.Sprintf("%s; approve to apply it again and accept the cost (the change: %s)", ch.Verdict, ch.Reason))
	for i := range s.Proposals {
		q := &s.Proposals[i]
		if q.CostRise && q.Status == ProposalPending && q.Config != nil && q.Config.Equal(cfg) {
			q.Rationale, q.Updated = why, now.UTC()
			return
		}
	}
	p := Proposal{ID: r.newID(now), AgentID: s.AgentID, ClusterID: ch.Cluster, Config: &cfg, Rationale: why,
		Confidence: 1, Status: ProposalPending, CostRise: true, Created: now.UTC(), Updated: now.UTC()}
	if cl := s.clusterByID(ch.Cluster); cl != nil {
		p.Class, p.Signature = cl.Class, freeText(cl.Sig)
	}
	kept := s.addProposal(p)
	eff.proposals = append(eff.proposals, kept.clone())
	eff.event(proposalEvent(r.newID(now), now, EventProposalFiled, kept))
}

// deliverable puts in e.Before the cost the config before the change
// under verification can deliver at now: when its route is dead, or the
// agent is away from it (a move for a transient cause), its calls would
// be answered by the next live route of the ladder, and the reference is
// the cost of the calls that route answered (none costed: no cost to
// compare), not the old route's past price.
func (s *agentState) deliverable(e *Evidence, now int64, r *ruleBook) {
	v, lad := s.Verifying, s.ladder(r)
	if v == nil || lad.empty() || s.Quality == nil {
		return
	}
	from := lad.name(v.From.Route)
	_, dead := s.deadAt(from, now, r)
	if !dead && !(s.away() && lad.name(s.Route.Home) == from) {
		return
	}
	ladder := lad.ladder()
	live := ""
	for _, rt := range ladder[slices.Index(ladder, from)+1:] {
		if _, d := s.deadAt(rt, now, r); !d {
			live = rt
			break
		}
	}
	var t qualityRec
	for i := range s.Quality.Recs {
		if q := &s.Quality.Recs[i]; live != "" && lad.name(q.Route) == live {
			t.Costed, t.CostOK, t.Cost = t.Costed+q.Costed, t.CostOK+q.CostOK, t.Cost+q.Cost
		}
	}
	c := t.stats()
	e.Before.Costed, e.Before.Cost, e.Before.CostPerSuccess = c.Costed, c.Cost, c.CostPerSuccess
}

// scoreSeen reports whether a score with key was booked among the
// agent's latest keyed scores (never for key 0: none).
func (s *agentState) scoreSeen(key uint64) bool {
	return key != 0 && s.Quality != nil && s.Quality.Keys.has(key)
}

// noteScoreKey remembers key as a score's booked by ID.
func (s *agentState) noteScoreKey(key uint64) {
	if s.Quality == nil {
		s.Quality = new(qualityBook)
	}
	if s.Quality.Keys == nil {
		s.Quality.Keys = new(scoreKeys)
	}
	s.Quality.Keys.add(key)
}

// watchScores feeds n scores of version, summing sum with squares
// summing squares, to the watch (see watchScore): one call's, or those of
// other replicas that a fleet's pool brought, which do not fire it (fire
// false): the replica's next scored call does, as its next failure
// answers the failures the pool brought. They are already booked.
func (s *agentState) watchScores(version int, n int64, sum, squares float64, now time.Time, fire bool, r *ruleBook, eff *effects) {
	p := &r.policy
	if !on(p.QualityDrop) || version != s.Config.Version || s.Verifying != nil || eff.analysis != nil || s.Quality == nil {
		return
	}
	w := &s.Quality.Watch
	if w.Version != version {
		*w = qualityWatch{Version: version, Until: w.Until, Ref: w.Ref, RefFor: w.RefFor}
	}
	if w.N == 0 && !w.start(s.qualityOf(version), n, sum, squares, p.QualityDrop) {
		return
	}
	limit := verdict.DetectLimit(qualityWatchAlpha)
	// Held at the limit while the watch may not fire.
	if w.LogW = min(verdict.DetectStep(w.LogW, int(n), sum, squares, w.Mean, w.Bet), limit); w.LogW <= 0 {
		w.N, w.Sum, w.Squares, w.LogW = 0, 0, 0, 0
		return
	}
	w.N += n
	w.Sum += sum
	w.Squares += squares
	endN := now.UnixNano()
	if !fire || w.LogW < limit || s.analyzing || endN < w.Until ||
		s.Tracker.Total < int64(p.MinBeforeCalls) && !s.operatorThreshold() {
		return
	}
	th, prof := s.threshold(endN)
	an := s.analysis(now, th, prof)
	an.Failures, an.Clusters = nil, nil // the analysis is about quality
	s.qualityOf(version).fill(&an.Stats)
	fall := qualityRec{Scored: w.N, Sum: w.Sum, Squares: w.Squares}
	an.QualityDrop = fall.stats()
	w.Until = endN + int64(p.QualityCooldown)
	w.N, w.Sum, w.Squares, w.LogW = 0, 0, 0, 0
	s.analyzing = true
	eff.th, eff.analysis = th, an
}

// qualityAnswered notes, for the change ch the analysis an led to, the
// fall of quality that started an (if one did): ch is judged against the
// scores of the fall (fallReference).
func (s *agentState) qualityAnswered(an *Analysis, ch *Change) {
	if an.QualityDrop.Scored == 0 || s.Quality == nil {
		return
	}
	s.Quality.Watch.Ref = fallReference(an.QualityDrop, an.Stats)
	s.Quality.Watch.Ref.Version = ch.To.Version
	s.Quality.Watch.RefFor = ""
}

// qualityFiled notes, for the proposal id the analysis an filed, the
// fall of quality that started an (if one did): the change an approval
// of id makes is judged against it (qualityApproved).
func (s *agentState) qualityFiled(an *Analysis, id string) {
	if an.QualityDrop.Scored == 0 || s.Quality == nil {
		return
	}
	s.Quality.Watch.Ref = fallReference(an.QualityDrop, an.Stats)
	s.Quality.Watch.RefFor = id
}

// qualityApproved marks ch, made by the approval of the proposal id, as
// the answer to the fall that proposal was filed for, if it was.
func (s *agentState) qualityApproved(id string, ch *Change) {
	if s.Quality == nil || s.Quality.Watch.RefFor != id || s.Quality.Watch.Ref.Scored == 0 {
		return
	}
	s.Quality.Watch.Ref.Version = ch.To.Version
	s.Quality.Watch.RefFor = ""
}

// qualityMove reports whether ch answered a fall of quality.
func (s *agentState) qualityMove(ch *Change) bool {
	return s.Quality != nil && s.Quality.Watch.Ref.Version == ch.To.Version && s.Quality.Watch.Ref.Scored > 0
}
