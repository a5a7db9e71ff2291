package verdict

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// bigCompare is Compare computed in math/big only.
func bigCompare(k, a, d, b, c int64, f float64, y, z int64) int {
	l := mul(big.NewInt(k), sub(mul(big.NewInt(a), big.NewInt(d)), mul(big.NewInt(b), big.NewInt(c))))
	r := new(big.Rat).SetFloat64(f)
	r.Mul(r, new(big.Rat).SetInt(mul(big.NewInt(y), big.NewInt(z))))
	return new(big.Rat).SetInt(l).Cmp(r)
}

// FuzzCompare checks that the float64 shortcut of the policies' exact
// comparison never disagrees with exact arithmetic.
func FuzzCompare(f *testing.F) {
	f.Add(int64(100), int64(9), int64(10), int64(8), int64(10), 10.0, int64(10), int64(10))
	f.Add(int64(100), int64(120000001), int64(100), int64(1000000000), int64(10), 20.0, int64(1000000000), int64(10))
	f.Add(int64(1), int64(1<<62), int64(3), int64(1<<61), int64(6), 0.1, int64(1<<40), int64(1<<20))
	f.Fuzz(func(t *testing.T, k, a, d, b, c int64, fl float64, y, z int64) {
		if math.IsNaN(fl) || math.IsInf(fl, 0) {
			return
		}
		if got, want := Compare(k, a, d, b, c, fl, y, z), bigCompare(k, a, d, b, c, fl, y, z); got != want {
			t.Fatalf("Compare(%d, %d, %d, %d, %d, %v, %d, %d) = %d, exact %d", k, a, d, b, c, fl, y, z, got, want)
		}
	})
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		name          string
		k, a, d, b, c int64
		f             float64
		y, z          int64
		want          int
	}{
		{"plainly above", 1, 10, 1, 0, 1, 1, 1, 1, 1},
		{"plainly below", 1, 0, 1, 10, 1, 1, 1, 1, -1},
		{"equal", 100, 9, 10, 8, 10, 10, 10, 10, 0},
		// 0.1 is a little above a tenth: 0.1·10 exceeds 1 exactly, though
		// it rounds to 1 in float64.
		{"f rounds to a tie", 1, 1, 1, 0, 1, 0.1, 10, 1, -1},
		// Products beyond int64 and beyond float64's 53 bits.
		{"beyond int64, equal", 1, 1 << 62, 4, 1 << 62, 4, 0, 1, 1, 0},
		{"beyond int64, one apart", 1, 1<<62 + 1, 1 << 40, 1 << 62, 1 << 40, 1 << 40, 1, 1, 0},
		{"beyond 53 bits, one above", 1, 1<<60 + 1, 3, 1 << 60, 3, 2, 1, 1, 1},
		{"negative f", 1, 0, 1, 0, 1, -0.5, 1, 1, 1},
		{"negative k", -1, 2, 1, 1, 1, 0, 1, 1, -1},
		{"zero everything", 0, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		if got := Compare(c.k, c.a, c.d, c.b, c.c, c.f, c.y, c.z); got != c.want {
			t.Errorf("%s: Compare = %d, want %d", c.name, got, c.want)
		}
		if got := bigCompare(c.k, c.a, c.d, c.b, c.c, c.f, c.y, c.z); got != c.want {
			t.Errorf("%s: bigCompare = %d, want %d (the case is wrong)", c.name, got, c.want)
		}
	}
}

func TestCompareDrop(t *testing.T) {
	for _, c := range []struct {
		name           string
		bs, bn, as, an int
		pts            float64
		want           int
	}{
		{"90 → 80 against 10: a tie", 9, 10, 8, 10, 10, 0},
		{"90 → 80 against 9.99", 9, 10, 8, 10, 9.99, 1},
		{"90 → 80 against 10.01", 9, 10, 8, 10, 10.01, -1},
		// In float64, 100·(0.7 − 0.6) is 9.999999999999998.
		{"70 → 60 against 10: a tie", 7, 10, 6, 10, 10, 0},
		{"different counts: 90 % → 80 %", 90, 100, 8, 10, 10, 0},
		{"a rise is no drop", 8, 10, 9, 10, 0, -1},
		{"equal rates, zero threshold", 9, 10, 90, 100, 0, 0},
		{"33.3… → 0 against 33.3", 1, 3, 0, 5, 33.3, 1},
		{"33.3… → 0 against 100/3", 1, 3, 0, 5, 100.0 / 3, -1}, // 100/3 rounds above a third of 100
	} {
		if got := CompareDrop(c.bs, c.bn, c.as, c.an, c.pts); got != c.want {
			t.Errorf("%s: CompareDrop(%d, %d, %d, %d, %v) = %d, want %d", c.name, c.bs, c.bn, c.as, c.an, c.pts, got, c.want)
		}
	}
}

func TestLatencyExceeds(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		bt    time.Duration
		bn    int
		at    time.Duration
		an    int
		pct   float64
		floor time.Duration
		want  bool
	}{
		{"+20 % against 20 %", 100 * 10 * ms, 100, 10 * 12 * ms, 10, 20, ms, false},
		{"+20 % and a nanosecond", 100 * 10 * ms, 100, 10*12*ms + 10, 10, 20, ms, true},
		{"30 → 36 ms against 20 %", 10 * 30 * ms, 10, 10 * 36 * ms, 10, 20, ms, false},
		{"+50 % exactly at the floor", 100 * 2 * ms, 100, 10 * 3 * ms, 10, 20, ms, true},
		{"+50 % under the floor", 100 * 2 * ms, 100, 10 * 2900 * time.Microsecond, 10, 20, ms, false},
		{"a fall", 10 * 30 * ms, 10, 10 * 20 * ms, 10, 20, 0, false},
		{"from zero latency", 0, 10, 10 * ms, 10, 20, 0, true},
		{"zero to zero", 0, 10, 0, 10, 20, 0, false},
	} {
		if got := LatencyExceeds(c.bt, c.bn, c.at, c.an, c.pct, c.floor); got != c.want {
			t.Errorf("%s: LatencyExceeds = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRisePct(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		before, after time.Duration
		want          float64
	}{
		{10 * ms, 12 * ms, 20}, {10 * ms, 5 * ms, -50}, {10 * ms, 10 * ms, 0}, {0, 5 * ms, 100}, {0, 0, 100},
	} {
		if got := RisePct(c.before, c.after); got != c.want {
			t.Errorf("RisePct(%v, %v) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
}

// The comparisons allocate nothing when float64 decides, as it does but
// near a tie.
func TestCompareAllocatesNothingApart(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { CompareDrop(9, 10, 5, 10, 10); LatencyExceeds(1000, 10, 2000, 10, 20, 1) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
