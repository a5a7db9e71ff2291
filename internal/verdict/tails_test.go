package verdict

import (
	"math"
	"math/big"
	"testing"
)

// closeTo reports whether got is within a relative 1e-9 of want, or
// within 1e-15 of it.
func closeTo(got, want float64) bool {
	d := math.Abs(got - want)
	return d <= 1e-9*max(want, 1e-12) || d <= 1e-15
}

// BinomTail against the binomial tail computed exactly in rationals.
func TestBinomTailExact(t *testing.T) {
	exact := func(n, k int, num, den int64) float64 {
		q, p := big.NewRat(num, den), big.NewRat(den-num, den)
		sum := new(big.Rat)
		for i := max(k, 0); i <= n; i++ {
			term := new(big.Rat).SetInt(new(big.Int).Binomial(int64(n), int64(i)))
			term.Mul(term, ratPow(q, i))
			term.Mul(term, ratPow(p, n-i))
			sum.Add(sum, term)
		}
		f, _ := sum.Float64()
		return f
	}
	for _, c := range []struct {
		n, k     int
		num, den int64
	}{
		{16, 5, 1, 10}, {16, 0, 1, 10}, {16, -3, 1, 10}, {16, 16, 1, 10}, {16, 17, 1, 10},
		{16, 1, 1, 2}, {16, 16, 1, 2}, {16, 9, 9, 10}, {16, 15, 99, 100}, {16, 2, 1, 100},
		{0, 0, 1, 10}, {0, 1, 1, 10}, {1, 1, 1, 4}, {200, 40, 1, 4}, {1000, 500, 1, 2},
	} {
		q := float64(c.num) / float64(c.den)
		want := exact(c.n, c.k, c.num, c.den)
		if got := BinomTail(c.n, c.k, q); !closeTo(got, want) {
			t.Errorf("BinomTail(%d, %d, %v) = %g, want %g", c.n, c.k, q, got, want)
		}
	}
}

func ratPow(r *big.Rat, n int) *big.Rat {
	out := big.NewRat(1, 1)
	for range n {
		out.Mul(out, r)
	}
	return out
}

func TestBinomTailEdges(t *testing.T) {
	for _, c := range []struct {
		n, k int
		q    float64
		want float64
	}{
		{16, 0, 0.1, 1},      // always at least none
		{16, -1, 0.1, 1},     // below none
		{16, 17, 0.1, 0},     // more than n
		{0, 0, 0.5, 1},       // no calls
		{0, 1, 0.5, 0},       // no calls, one failure
		{16, 1, 1e-300, 0},   // the first term is 1, the rest underflow
		{16, 16, 1e-20, 0},   // 1e-320 is subnormal: kept as far as it goes
		{3, 3, 0.5, 0.125},   // all of them
		{3, 1, 0.5, 0.875},   // at least one
		{1, 1, 0.25, 0.25},   // one call
		{2, 1, 0.75, 0.9375}, // at least one of two
	} {
		if got := BinomTail(c.n, c.k, c.q); !closeTo(got, c.want) && !(c.want == 0 && got < 1e-300) {
			t.Errorf("BinomTail(%d, %d, %v) = %g, want %g", c.n, c.k, c.q, got, c.want)
		}
	}
	// Never above 1, however the terms round.
	for n := 0; n <= 64; n++ {
		for _, q := range []float64{1e-6, 0.1, 1.0 / 3, 0.5, 0.9, 1 - 1e-6} {
			if got := BinomTail(n, 1, q); got > 1 || got < 0 {
				t.Fatalf("BinomTail(%d, 1, %v) = %v", n, q, got)
			}
		}
	}
}

func TestConsistent(t *testing.T) {
	const odds = 0.00135 // three standard errors of a normal, one-sided
	for _, c := range []struct {
		n, f int
		q    float64
		want bool
	}{
		{16, 2, 0.1, true},
		{16, 7, 0.1, false},  // too many failures for 10 %
		{16, 0, 0.5, false},  // too few for 50 %: 2^-16
		{16, 16, 0.5, false}, // too many
		{16, 8, 0.5, true},
		{0, 0, 0.1, true}, // no calls contradict nothing
		{16, 0, 0.1, true},
	} {
		if got := Consistent(c.n, c.f, c.q, odds); got != c.want {
			t.Errorf("Consistent(%d, %d, %v) = %v, want %v", c.n, c.f, c.q, got, c.want)
		}
	}
}

// PredictiveTail against the beta-binomial computed exactly in rationals
// for integer shape parameters: P(F = k) = C(n, k) B(k+a, n-k+b) / B(a, b).
func TestPredictiveTailExact(t *testing.T) {
	beta := func(a, b int64) *big.Rat { // B(a, b) = (a-1)!(b-1)!/(a+b-1)!
		f := func(n int64) *big.Int { return new(big.Int).MulRange(1, max(n, 1)) }
		num := new(big.Int).Mul(f(a-1), f(b-1))
		return new(big.Rat).SetFrac(num, f(a+b-1))
	}
	for _, c := range []struct{ n, f, a, b int }{
		{60, 13, 20, 180}, {60, 0, 3, 7}, {60, 61, 3, 7}, {54, 21, 21, 181}, {6, 4, 20, 180}, {16, 5, 1, 1}, {100, 50, 40, 40},
		{60, -1, 3, 7}, {60, 60, 3, 7}, {0, 0, 2, 2}, {0, 1, 2, 2}, {1, 1, 1, 1}, {60, 1, 1, 200},
	} {
		want := new(big.Rat)
		for k := max(c.f, 0); k <= c.n; k++ {
			term := new(big.Rat).SetInt(new(big.Int).Binomial(int64(c.n), int64(k)))
			term.Mul(term, beta(int64(k+c.a), int64(c.n-k+c.b)))
			term.Quo(term, beta(int64(c.a), int64(c.b)))
			want.Add(want, term)
		}
		w, _ := want.Float64()
		if c.f <= 0 {
			w = 1
		}
		got := PredictiveTail(c.n, c.f, float64(c.a), float64(c.b))
		if !closeTo(got, w) {
			t.Errorf("PredictiveTail(%d, %d, %d, %d) = %g, want %g", c.n, c.f, c.a, c.b, got, w)
		}
	}
}

// With a reference of many calls, the rate is all but known and the
// predictive tail is the binomial's; with few, it is wider.
func TestPredictiveTailLimits(t *testing.T) {
	for _, f := range []int{1, 6, 10, 15, 25} {
		const n, q = 60, 0.1
		b := BinomTail(n, f, q)
		known := PredictiveTail(n, f, q*1e7, (1-q)*1e7)
		if math.Abs(known-b) > 1e-3*b {
			t.Errorf("f=%d: a reference of 1e7 calls gives %g, the binomial %g", f, known, b)
		}
		if f > 10 {
			if few := PredictiveTail(n, f, q*20, (1-q)*20); few <= b {
				t.Errorf("f=%d: a reference of 20 calls gives %g, not above the binomial's %g", f, few, b)
			}
		}
	}
}

// BinomTail and PredictiveTail allocate nothing: the backstop runs on a
// call's path.
func TestTailsAllocateNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { BinomTail(16, 5, 0.1); PredictiveTail(60, 13, 20, 180) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
