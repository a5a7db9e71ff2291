package verdict

import "math"

// The detection of a fall of the mean score: a CUSUM of e-values, the
// e-CUSUM of Shin, Ramdas & Rinaldo (2024, "E-detectors: a
// nonparametric framework for sequential change detection"). Each score
// X in [0, 1] brings the e-value 1 + f(m - X)/(1 - m) against "the mean
// is at least m": its mean is at most 1 while the hypothesis holds, for
// any bet f in [0, 1) fixed before the score is seen, and it is never
// below 1 - f. The statistic is the log of the largest product of the
// e-values of a run of the latest scores: it adds each score's log
// e-value and starts afresh at 0 when it falls to 0 or below. It is at
// most the Shiryaev-Roberts statistic of the same e-values (their
// products summed over every start), so that, compared with log(1/α),
// it reports a fall at the soonest after 1/α scores on average while the
// mean holds, whatever the scores' law (ARL ≥ 1/α).
//
// The bet is the only tuning: a large one grows the statistic fast after
// a fall, when the scores are spread little, but it lets a run of low
// scores of a healthy config with widely spread scores (thumbs up and
// down) reach the limit. DetectBet sizes it from the established scores:
// the healthy scores, of mean mean above m, make the statistic drift
// down, and the bet is the largest (up to MaxDetectBet) that keeps the
// exponent θ of its random walk, E[(1 + f·ξ)^θ] = 1, near 1 + 2/κ
// (κ = DetectBetScale): the false alarms of a healthy config are then
// about (1/α)^θ apart rather than 1/α.

const (
	// MaxDetectBet is the largest bet, a fraction of the statistic's
	// wealth: a score of 1 keeps 1 - MaxDetectBet of it.
	MaxDetectBet = 0.9
	// DetectBetScale (κ) scales the bet, κ·g·(1 - m)/σ², where g is the
	// margin of the established mean over m and σ² the established
	// scores' variance.
	DetectBetScale = 2
)

// DetectBet returns the bet of the detection against "the mean is at
// least m", for established scores of mean mean and standard deviation
// sd (see above): min(MaxDetectBet, DetectBetScale·(mean-m)(1-m)/sd²),
// MaxDetectBet for scores that do not vary, 0 when m is not in (0, 1) or
// not below mean.
func DetectBet(mean, sd, m float64) float64 {
	if !(m > 0 && m < 1 && mean > m) || math.IsNaN(sd) {
		return 0
	}
	f := DetectBetScale * (mean - m) * (1 - m) / (sd * sd)
	if !(f < MaxDetectBet) { // also sd 0: f is +Inf
		return MaxDetectBet
	}
	return f
}

// DetectStep returns the detection's statistic w after n more scores, of
// sum s and sum of squares q, at bet f against "the mean is at least m":
// w plus their log e-value, 0 when that falls to 0 or below. A score x
// brings log(1 + f(m - x)/(1 - m)). Scores summed elsewhere (a fleet's
// pool sends sums) bring a lower bound of the sum of theirs that their
// sums give (detectSum): exact for one score or two. w is returned
// unchanged for n ≤ 0, NaN sums, m outside (0, 1) or f outside (0, 1).
func DetectStep(w float64, n int, s, q, m, f float64) float64 {
	if n <= 0 || math.IsNaN(s) || math.IsNaN(q) || !(m > 0 && m < 1) || !(f > 0 && f < 1) {
		return w
	}
	if w += detectSum(n, s, q, m, f); !(w > 0) {
		return 0
	}
	return w
}

// detectSum returns a lower bound of Σ log(1 + fξ), ξ = (m - x)/(1 - m),
// over n scores x in [0, 1] of sum s and squares q. φ(ξ) = log(1 + fξ)
// has a positive third derivative, so that on [-1, ∞) it is above the
// parabola P through φ at ξ = -1 (a score of 1) and tangent to it at t:
// then Σφ(ξ) ≥ ΣP(ξ), a function of the sums alone, and t = μ + σ²/(μ+1)
// (μ and σ² the mean and variance of the ξ) makes it exact for scores at
// two points, one of them 1. Two scores are found from their sums and
// summed exactly.
func detectSum(n int, s, q, m, f float64) float64 {
	phi := func(xi float64) float64 { return math.Log1p(f * xi) }
	xi := func(x float64) float64 { return (m - min(max(x, 0), 1)) / (1 - m) }
	fn := float64(n)
	mean := s / fn
	v := max(q/fn-mean*mean, 0) // the scores' variance
	switch {
	case n == 1 || v == 0:
		return fn * phi(xi(mean))
	case n == 2:
		d := math.Sqrt(v)
		return phi(xi(mean-d)) + phi(xi(mean+d))
	}
	mu := xi(mean)
	v /= (1 - m) * (1 - m) // the ξ's variance
	if !(mu > -1) {
		return fn * phi(-1)
	}
	t := mu + v/(mu+1)
	d1 := f / (1 + f*t) // φ'(t)
	k := (phi(-1) - phi(t) + d1*(1+t)) / ((1 + t) * (1 + t))
	return fn * (phi(t) + d1*(mu-t) + k*(v+(mu-t)*(mu-t)))
}

// DetectLimit is the limit of the detection's statistic at false-alarm
// rate alpha (one in 1/alpha scores at the soonest): log(1/alpha); +Inf
// for an alpha outside (0, 1).
func DetectLimit(alpha float64) float64 {
	if !(alpha > 0 && alpha < 1) {
		return math.Inf(1)
	}
	return -math.Log(alpha)
}
