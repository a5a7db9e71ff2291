package verdict

import (
	"math"
	"math/big"
	"time"
)

// Compare returns the sign of k·(a·d − b·c) − f·y·z, computed exactly for
// finite f. It decides in float64 when the two sides are far apart
// relative to the rounding of their terms, and in math/big otherwise (the
// only case in which it allocates).
func Compare(k, a, d, b, c int64, f float64, y, z int64) int {
	ad, bc := float64(a)*float64(d), float64(b)*float64(c)
	lhs, rhs := float64(k)*(ad-bc), f*float64(y)*float64(z)
	scale := math.Abs(float64(k))*(math.Abs(ad)+math.Abs(bc)) + math.Abs(rhs)
	if diff := lhs - rhs; math.Abs(diff) > 1e-9*scale {
		if diff > 0 {
			return 1
		}
		return -1
	}
	l := mul(big.NewInt(k), sub(mul(big.NewInt(a), big.NewInt(d)), mul(big.NewInt(b), big.NewInt(c))))
	r := new(big.Rat).SetFloat64(f)
	r.Mul(r, new(big.Rat).SetInt(mul(big.NewInt(y), big.NewInt(z))))
	return new(big.Rat).SetInt(l).Cmp(r)
}

func mul(a, b *big.Int) *big.Int { return new(big.Int).Mul(a, b) }
func sub(a, b *big.Int) *big.Int { return new(big.Int).Sub(a, b) }

// CompareDrop returns the sign of the fall of the success rate from
// bs/bn (successes out of calls) to as/an, in percentage points, less
// pts, exactly: the sign of 100·(bs·an − as·bn) − pts·bn·an.
func CompareDrop(bs, bn, as, an int, pts float64) int {
	return Compare(100, int64(bs), int64(an), int64(as), int64(bn), pts, int64(bn), int64(an))
}

// LatencyExceeds reports whether the average latency rose from bt/bn
// (the total latency of bn calls) to at/an by more than pct percent and by
// at least floor, exactly: 100·(at·bn − bt·an) > pct·bt·an and
// at·bn − bt·an ≥ floor·bn·an.
func LatencyExceeds(bt time.Duration, bn int, at time.Duration, an int, pct float64, floor time.Duration) bool {
	bl, al := int64(bt), int64(at)
	b, a := int64(bn), int64(an)
	return Compare(100, al, b, bl, a, pct, bl, a) > 0 &&
		Compare(1, al, b, bl, a, float64(floor), b, a) >= 0
}

// RisePct is the rise from before to after in percent of before; 100
// when before is 0.
func RisePct(before, after time.Duration) float64 {
	if before == 0 {
		return 100
	}
	return 100 * float64(after-before) / float64(before)
}
