package verdict

import (
	"math"
	"testing"
)

func TestAlternative(t *testing.T) {
	for _, c := range []struct{ p0, drop, want float64 }{
		{0.9, 0.2, 0.9 - 0.2},
		{0.5, 0.2, 0.5 - 0.2},
		{0.2, 0.2, 0.1},    // p0 − drop is 0: half of p0
		{0.15, 0.2, 0.075}, // negative: half of p0
		{0.9, 0, 0.9},
	} {
		if got := Alternative(c.p0, c.drop); got != c.want {
			t.Errorf("Alternative(%v, %v) = %v, want %v", c.p0, c.drop, got, c.want)
		}
	}
}

func TestLogLR(t *testing.T) {
	for _, c := range []struct {
		s, f   int
		p0, p1 float64
	}{
		{0, 0, 0.9, 0.7}, {10, 0, 0.9, 0.7}, {0, 3, 0.9, 0.7}, {45, 15, 0.9, 0.7}, {100, 1, 0.99, 0.5}, {3, 97, 0.02, 0.01},
	} {
		// The log of the ratio of the two likelihoods, computed directly.
		want := math.Log(math.Pow(c.p1, float64(c.s)) * math.Pow(1-c.p1, float64(c.f)) /
			(math.Pow(c.p0, float64(c.s)) * math.Pow(1-c.p0, float64(c.f))))
		if got := LogLR(c.s, c.f, c.p0, c.p1); math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
			t.Errorf("LogLR(%d, %d, %v, %v) = %v, want %v", c.s, c.f, c.p0, c.p1, got, want)
		}
	}
	if got := LogLR(0, 0, 0.9, 0.7); got != 0 {
		t.Errorf("no calls: %v, want 0", got)
	}
}

func TestLimits(t *testing.T) {
	for _, c := range []struct{ alpha, beta, lower, upper float64 }{
		{0.05, 0.02, -3.8607297110405954, 2.9755295662364714}, // MethodQuick's defaults
		{0.004, 0.02, -3.9080149840306073, 5.501258210544727}, // MethodSequential's
	} {
		lower, upper := Limits(c.alpha, c.beta)
		if !near(lower, c.lower, 1e-12) || !near(upper, c.upper, 1e-12) {
			t.Errorf("Limits(%v, %v) = %v, %v, want %v, %v", c.alpha, c.beta, lower, upper, c.lower, c.upper)
		}
	}
}

// From a 90 % reference against a fall to 70 %, at MethodQuick's error
// rates: three failures in a row reach the upper limit, two do not, and
// a run of successes reaches the lower one on the 16th.
func TestSequentialDecides(t *testing.T) {
	p0 := 0.9
	p1 := Alternative(p0, 0.2)
	lower, upper := Limits(0.05, 0.02)
	if LogLR(0, 2, p0, p1) >= upper || LogLR(0, 3, p0, p1) < upper {
		t.Errorf("failures in a row: 2 → %v, 3 → %v, upper limit %v", LogLR(0, 2, p0, p1), LogLR(0, 3, p0, p1), upper)
	}
	if LogLR(15, 0, p0, p1) <= lower || LogLR(16, 0, p0, p1) > lower {
		t.Errorf("successes in a row: 15 → %v, 16 → %v, lower limit %v", LogLR(15, 0, p0, p1), LogLR(16, 0, p0, p1), lower)
	}
}
