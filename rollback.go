package selfimprove

import (
	"fmt"
	"math"
	"math/big"
	"time"
)

// RollbackPolicy decides whether a config change is kept. While a change is
// verified, the loop compares the stats of the calls that ran under the new
// version ("after") with the analysis window's stats when the change was
// applied ("before"):
//
//   - after MaxConsecutiveFailures consecutive failures under the new
//     version, it rolls back at once;
//   - once MinCalls calls have run under the new version, it rolls back if
//     the success rate fell by more than MaxSuccessDrop percentage points,
//     or the average latency rose by more than MaxLatencyRise percent and by
//     at least MinLatencyRise; otherwise it confirms the change and
//     verification ends.
//
// Comparisons are exact: a drop of exactly MaxSuccessDrop points or a rise
// of exactly MaxLatencyRise percent is kept. Rates and averages are
// compared as exact fractions of the counts, never as rounded floats.
//
// The zero value is the default policy; each zero field takes its default,
// and a negative (or NaN, or +Inf) MaxSuccessDrop or MaxLatencyRise, or a
// negative MaxConsecutiveFailures, turns that rule off.
type RollbackPolicy struct {
	// MinCalls is how many calls under the new version verification
	// waits for before comparing rates. Default 10.
	MinCalls int
	// MaxSuccessDrop is the largest tolerated fall of the success rate,
	// in percentage points. Default 10.
	MaxSuccessDrop float64
	// MaxLatencyRise is the largest tolerated rise of the average latency,
	// in percent. Default 20.
	MaxLatencyRise float64
	// MinLatencyRise is the absolute floor below which a latency rise never
	// rolls back, so that microsecond noise on fast calls is ignored.
	// Default 1ms.
	MinLatencyRise time.Duration
	// MaxConsecutiveFailures under the new version roll back at once,
	// without waiting for MinCalls. Default 5.
	MaxConsecutiveFailures int
}

// The default policy values.
const (
	DefaultVerifyCalls            = 10
	DefaultMaxSuccessDrop         = 10.0
	DefaultMaxLatencyRise         = 20.0
	DefaultMinLatencyRise         = time.Millisecond
	DefaultMaxConsecutiveFailures = 5
)

// withDefaults fills the zero fields.
func (p RollbackPolicy) withDefaults() RollbackPolicy {
	if p.MinCalls <= 0 {
		p.MinCalls = DefaultVerifyCalls
	}
	if p.MaxSuccessDrop == 0 {
		p.MaxSuccessDrop = DefaultMaxSuccessDrop
	}
	if p.MaxLatencyRise == 0 {
		p.MaxLatencyRise = DefaultMaxLatencyRise
	}
	if p.MinLatencyRise == 0 {
		p.MinLatencyRise = DefaultMinLatencyRise
	}
	if p.MaxConsecutiveFailures == 0 {
		p.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	return p
}

// Decision is a policy's answer about a change under verification.
type Decision int

// The decisions.
const (
	DecisionWait     Decision = iota // not enough evidence yet: keep verifying
	DecisionConfirm                  // keep the change and end verification
	DecisionRollback                 // restore the previous config
)

// String returns "wait", "confirm" or "rollback".
func (d Decision) String() string {
	switch d {
	case DecisionWait:
		return "wait"
	case DecisionConfirm:
		return "confirm"
	case DecisionRollback:
		return "rollback"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Verdict is a Decision with the reason for it.
type Verdict struct {
	Decision Decision
	Reason   string
}

// Judge decides about a change from the stats before it and the stats of
// the calls under it. It uses Calls, Failures, TotalLatency and
// ConsecutiveFailures of after, and Calls, Failures and TotalLatency of
// before. It is a pure function.
func (p RollbackPolicy) Judge(before, after Stats) Verdict {
	p = p.withDefaults()
	if p.MaxConsecutiveFailures > 0 && after.ConsecutiveFailures >= p.MaxConsecutiveFailures {
		return Verdict{DecisionRollback, fmt.Sprintf("%d consecutive failures under the new config (limit %d)",
			after.ConsecutiveFailures, p.MaxConsecutiveFailures)}
	}
	if after.Calls < p.MinCalls {
		return Verdict{Decision: DecisionWait}
	}
	if before.Calls <= 0 {
		return Verdict{DecisionConfirm, fmt.Sprintf("%d calls under the new config, no calls before to compare with", after.Calls)}
	}
	bn, an := big.NewInt(int64(before.Calls)), big.NewInt(int64(after.Calls))
	bs := big.NewInt(int64(before.Calls - before.Failures))
	as := big.NewInt(int64(after.Calls - after.Failures))
	bl, al := big.NewInt(int64(before.TotalLatency)), big.NewInt(int64(after.TotalLatency))
	bnan := mul(bn, an)

	// Success: before-after > drop/100  <=>  100*(bs*an - as*bn) > drop*bn*an.
	if p.MaxSuccessDrop > 0 {
		diff := sub(mul(bs, an), mul(as, bn))
		if ratGreater(mul(big.NewInt(100), diff), p.MaxSuccessDrop, bnan) {
			return Verdict{DecisionRollback, fmt.Sprintf("success rate fell %.1f points (%.1f%% → %.1f%%), more than %g",
				100*(rate(before)-rate(after)), 100*rate(before), 100*rate(after), p.MaxSuccessDrop)}
		}
	}
	// Latency: al/an > bl/bn*(1+rise/100) and al/an - bl/bn >= floor
	//   <=> 100*(al*bn - bl*an) > rise*bl*an  and  al*bn - bl*an >= floor*bn*an.
	if p.MaxLatencyRise > 0 {
		diff := sub(mul(al, bn), mul(bl, an))
		floor := mul(big.NewInt(int64(p.MinLatencyRise)), bnan)
		if ratGreater(mul(big.NewInt(100), diff), p.MaxLatencyRise, mul(bl, an)) && diff.Cmp(floor) >= 0 {
			b, a := avg(before), avg(after)
			return Verdict{DecisionRollback, fmt.Sprintf("average latency rose %.1f%% (%v → %v), more than %g%%",
				pctRise(b, a), b, a, p.MaxLatencyRise)}
		}
	}
	return Verdict{DecisionConfirm, fmt.Sprintf("%d calls under the new config: success %.1f%% (was %.1f%%), average latency %v (was %v)",
		after.Calls, 100*rate(after), 100*rate(before), avg(after), avg(before))}
}

func mul(a, b *big.Int) *big.Int { return new(big.Int).Mul(a, b) }
func sub(a, b *big.Int) *big.Int { return new(big.Int).Sub(a, b) }

// ratGreater reports whether x > f*y exactly, f being taken as the exact
// binary value of the float.
func ratGreater(x *big.Int, f float64, y *big.Int) bool {
	if math.IsInf(f, 1) || math.IsNaN(f) {
		return false
	}
	r := new(big.Rat).SetFloat64(f)
	r.Mul(r, new(big.Rat).SetInt(y))
	return new(big.Rat).SetInt(x).Cmp(r) > 0
}

// avg is s's average latency, rounded to the microsecond for messages.
func avg(s Stats) time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return (s.TotalLatency / time.Duration(s.Calls)).Round(time.Microsecond)
}

func rate(s Stats) float64 {
	if s.Calls == 0 {
		return 1
	}
	return float64(s.Calls-s.Failures) / float64(s.Calls)
}

func pctRise(before, after time.Duration) float64 {
	if before == 0 {
		return 100
	}
	return 100 * float64(after-before) / float64(before)
}
