package selfimprove

import (
	"math"

	"github.com/self-improving-loop/selfimprove/internal/verdict"
)

// Quality as a trigger (docs/quality.md): a sustained fall of the mean
// score of the config in force starts an analysis, as failures do.
//
// The watch is an e-detector (Shin, Ramdas & Rinaldo 2024, "E-detectors:
// a nonparametric framework for sequential change detection"), a CUSUM
// of e-values (verdict.DetectStep): each scored call of the config bets,
// at a fraction verdict.DetectBet of the watch's wealth, against "the
// mean is at least m", with m the config's established mean (of its
// scores before the run) less one standard error of it and less
// RollbackPolicy.QualityDrop. The run of scores starts afresh whenever
// its log-wealth falls to 0 or below, and the watch fires when it
// reaches log(1/qualityWatchAlpha): on a config whose mean stays above m
// it fires after 1/qualityWatchAlpha scored calls on average at the
// soonest (the statistic is at most the Shiryaev-Roberts one), and on a
// healthy config, whose mean is QualityDrop and more above m, far more
// rarely (docs/quality.md: no more than 1 in 100,000 scored calls,
// measured). Before, the watch bet the mixture of verdict.LogWealth on
// the run's sums: a fall of 0.25 at σ 0.15 took a median 40 scored calls
// to see, 13 now.
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
	// run's scores; Mean the m they are tested against, Bet the fraction
	// of its wealth the run bets on each score, and LogW its log-wealth
	// (positive while N is; a state file from before the bet has none,
	// and its run starts afresh).
	Version int     `json:"version"`
	N       int64   `json:"scored,omitempty"`
	Sum     float64 `json:"score_sum,omitempty"`
	Squares float64 `json:"score_squares,omitempty"`
	Mean    float64 `json:"mean,omitempty"`
	Bet     float64 `json:"bet,omitempty"`
	LogW    float64 `json:"log_wealth,omitempty"`
	// Until is when the watch may start an analysis again (Unix ns).
	Until int64 `json:"cooldown_until_ns,omitempty"`
	// Ref is the fall's scores, recorded for the change it led to
	// (Ref.Version is that change's new version): that change is judged
	// against them, not against the config's whole past.
	Ref qualityRec `json:"change_reference,omitzero"`
	// RefFor is the proposal filed for the fall Ref holds, while Ref
	// waits for its approval (Ref.Version 0): the change that approval
	// makes is judged against the fall, as one the loop made would be.
	RefFor string `json:"change_reference_proposal,omitempty"`
}

// start starts a run of the watch, at n scores of sum sum and squares
// squares of the config whose record is rec (already booked there): it
// sets the m they are tested against, from the scores before them, and
// the bet. It reports false (the scores are not watched) while the config
// has fewer than qualityWatchMin scores before them, or when m is not
// positive (no fall of drop to watch for).
func (w *qualityWatch) start(rec *qualityRec, n int64, sum, squares, drop float64) bool {
	w.Mean, w.Bet, w.LogW = 0, 0, 0
	before := float64(rec.Scored - n)
	if before < qualityWatchMin {
		return false
	}
	mean := (rec.Sum - sum) / before
	sd := math.Sqrt(max((rec.Squares-squares)/before-mean*mean, 0))
	m := mean - sd/math.Sqrt(before) - drop
	if !(m > 0) {
		return false
	}
	w.Mean, w.Bet = min(m, 1), verdict.DetectBet(mean, sd, m)
	return w.Bet > 0
}

// fallReference returns the scores of the fall drop of a config whose
// scores in all (the fall's among them) are all, as the reference of
// the change that answers it. A fall seen in fewer than qualityMinRef
// scored calls (the watch sees a steep one in a dozen) is topped up to
// qualityMinRef with the config's other scores, at their mean and
// spread: the few scores that set the watch off are its lowest, and too
// few to judge a change against (rollback_quality.go).
func fallReference(drop, all Stats) qualityRec {
	n, sum, sq := scoreSums(drop)
	ref := qualityRec{Scored: int64(n), Sum: sum, Squares: sq}
	an, asum, asq := scoreSums(all)
	if other := an - n; n < qualityMinRef && other > 0 {
		k := float64(min(qualityMinRef-n, other)) / float64(other)
		ref.Scored += int64(min(qualityMinRef-n, other))
		ref.Sum += k * max(asum-sum, 0)
		ref.Squares += k * max(asq-sq, 0)
	}
	// Sums taken apart from means and deviations: kept in range.
	ref.Sum = min(ref.Sum, float64(ref.Scored))
	ref.Squares = min(ref.Squares, ref.Sum)
	return ref
}

// falling reports whether the watch of version has a run of scores open:
// its latest scores, taken together, fell below the mean it tests
// against (a fall it may not have fired on yet). The config is not
// explored then: its scores are no reference while they may be falling.
func (w *qualityWatch) falling(version int) bool {
	return w.Version == version && w.LogW > 0
}
