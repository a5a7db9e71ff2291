package verdict

import "math"

// Wald's sequential probability ratio test of a success rate, H0 "the
// rate is p0" against H1 "it is p1" (p1 < p0): after each call, the log of
// the likelihood ratio of H1 to H0 is compared with the limits of Limits;
// reaching the upper one accepts H1, falling to the lower one accepts H0.

// Alternative is the test's H1 rate for a fall of drop below p0: p0 − drop,
// or p0/2 when that is not positive.
func Alternative(p0, drop float64) float64 {
	p1 := p0 - drop
	if p1 <= 0 {
		p1 = p0 / 2
	}
	return p1
}

// LogLR is the log of the likelihood ratio of H1 (success rate p1) to H0
// (p0) after successes successes and failures failures. p0 and p1 must lie
// in (0, 1).
func LogLR(successes, failures int, p0, p1 float64) float64 {
	s, f := float64(successes), float64(failures)
	return s*math.Log(p1/p0) + f*math.Log((1-p1)/(1-p0))
}

// Limits are the test's limits on LogLR for the error rates alpha (accept
// H1 when H0 holds) and beta (accept H0 when H1 holds): H1 once the ratio
// reaches upper = log((1−β)/α), H0 once it falls to lower = log(β/(1−α)).
// alpha and beta must lie in (0, 1).
func Limits(alpha, beta float64) (lower, upper float64) {
	return math.Log(beta / (1 - alpha)), math.Log((1 - beta) / alpha)
}
