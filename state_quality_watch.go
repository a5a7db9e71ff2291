package selfimprove

import (
	"math"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// Quality as a trigger (docs/quality.md): a sustained fall of the mean
// score of the config in force starts an analysis, as failures do.
//
// The watch is an e-detector (Shin, Ramdas & Rinaldo 2024, "E-detectors:
// a nonparametric framework for sequential change detection"): a run of
// the config's recent scores is tested, by the betting test of
// verification (verdict.LogWealth), against "their mean is at least m",
// with m the config's established mean (of its scores before the run)
// less one standard error of it and less RollbackPolicy.QualityDrop. The
// run starts afresh whenever its wealth falls to 1 or below, and the
// watch fires when it reaches 1/qualityWatchAlpha. Each run's wealth is
// an e-process, and their sum less the number of scores is a
// supermartingale while the mean holds (the Shiryaev-Roberts argument),
// so that the watch fires, on a config whose mean stays above m, after
// 1/qualityWatchAlpha scored calls on average at the soonest.
const (
	// qualityWatchMin is the fewest scored calls of the config in force
	// that establish its mean.
	qualityWatchMin = 50
	// qualityWatchAlpha is the inverse of the least average number of
	// scored calls between two false alarms.
	qualityWatchAlpha = 0.001
)

// qualityWatch is the watch of an agent's mean score (saved in its
// state's quality_watch).
type qualityWatch struct {
	// Version is the config version watched; N, Sum and Squares the
	// run's scores; Mean the m they are tested against.
	Version int     `json:"version"`
	N       int64   `json:"scored,omitempty"`
	Sum     float64 `json:"score_sum,omitempty"`
	Squares float64 `json:"score_squares,omitempty"`
	Mean    float64 `json:"mean,omitempty"`
	// Until is when the watch may start an analysis again (Unix ns).
	Until int64 `json:"cooldown_until_ns,omitempty"`
	// Ref is the fall's scores, recorded for the change it led to
	// (Ref.Version is that change's new version): that change is judged
	// against them, not against the config's whole past.
	Ref qualityRec `json:"change_reference,omitzero"`
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
		*w = qualityWatch{Version: version, Until: w.Until, Ref: w.Ref}
	}
	if w.N == 0 {
		rec := s.qualityOf(version)
		before := float64(rec.Scored - n) // the scores before these
		if before < qualityWatchMin {
			return
		}
		mean := (rec.Sum - sum) / before
		sd := math.Sqrt(max((rec.Squares-squares)/before-mean*mean, 0))
		if w.Mean = mean - sd/math.Sqrt(before) - p.QualityDrop; !(w.Mean > 0) {
			return // no fall to watch for
		}
	}
	w.N += n
	w.Sum += sum
	w.Squares += squares
	lw := verdict.LogWealth(int(w.N), w.Sum, w.Squares, w.Mean)
	if lw <= 0 {
		w.N, w.Sum, w.Squares = 0, 0, 0
		return
	}
	endN := now.UnixNano()
	if !fire || lw < -math.Log(qualityWatchAlpha) || s.analyzing || endN < w.Until ||
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
	w.N, w.Sum, w.Squares = 0, 0, 0
	s.analyzing = true
	eff.th, eff.analysis = th, an
}

// qualityAnswered notes, for the change ch the analysis an led to, the
// fall of quality that started an (if one did): ch is judged against the
// scores of the fall.
func (s *agentState) qualityAnswered(an *Analysis, ch *Change) {
	d := an.QualityDrop
	if d.Scored == 0 || s.Quality == nil {
		return
	}
	n, sum, sq := scoreSums(d)
	s.Quality.Watch.Ref = qualityRec{Version: ch.To.Version, Scored: int64(n), Sum: sum, Squares: sq}
}

// qualityMove reports whether ch answered a fall of quality.
func (s *agentState) qualityMove(ch *Change) bool {
	return s.Quality != nil && s.Quality.Watch.Ref.Version == ch.To.Version && s.Quality.Watch.Ref.Scored > 0
}
