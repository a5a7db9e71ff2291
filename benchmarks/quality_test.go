package benchmarks

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// The quality simulation: deterministic seeds, no loop, no clock. It runs
//
//	go test ./benchmarks -run TestQualitySimulation -v
//
// An agent whose calls all succeed in 80–120 ms has a reference of
// qualityRef calls scored under its config, of mean 0.85 and standard
// deviation 0.25 (beta-distributed). A change lands; every call under it
// is scored, and the default policy is asked after each, as the loop
// asks it, until it decides. A harmless change keeps the scores' law; a
// harmful one lowers their mean by 0.10 or 0.15 (σ 0.25). Costs are 1 a
// call before the change, and under it 1, or 5 for the costly change of
// equal quality.

// qualityRef is how many scored calls the reference has.
const qualityRef = 500

// scoreStats sets s's quality figures from n scores of sum and squares.
func scoreStats(s *si.Stats, n int, sum, squares float64) {
	s.Scored = n
	if n > 0 {
		s.Quality = sum / float64(n)
		s.QualitySD = math.Sqrt(max(squares/float64(n)-s.Quality*s.Quality, 0))
	}
}

// qualityTrial runs one change whose scores have mean 0.85-drop and whose
// calls cost cost, and returns whether it was rolled back, at which call,
// and the verdict.
func qualityTrial(r *rand.Rand, p si.RollbackPolicy, drop, cost float64) (rolledBack bool, calls int, reason string) {
	ms := time.Millisecond
	lat := func() time.Duration { return time.Duration(80+r.IntN(41)) * ms }
	var e si.Evidence
	var sum, sq float64
	for range qualityRef {
		x := scoresim.Beta(r, 0.85, 0.25)
		sum, sq = sum+x, sq+x*x
	}
	e.Before = si.Stats{Calls: 16, SuccessRate: 1, TotalLatency: 1600 * ms, SuccessLatency: 1600 * ms,
		Costed: qualityRef, Cost: qualityRef, CostPerSuccess: 1}
	scoreStats(&e.Before, qualityRef, sum, sq)
	e.Window = si.Stats{Calls: 200, SuccessRate: 1, TotalLatency: 200 * 100 * ms}
	sum, sq = 0, 0
	for n := 1; n <= 10000; n++ {
		d := lat()
		e.After.Calls++
		e.After.TotalLatency += d
		e.After.SuccessLatency += d
		e.After.SuccessRate = 1
		x := scoresim.Beta(r, 0.85-drop, 0.25)
		sum, sq = sum+x, sq+x*x
		scoreStats(&e.After, n, sum, sq)
		e.After.Costed, e.After.Cost = n, e.After.Cost+cost
		e.After.CostPerSuccess = e.After.Cost / float64(n)
		switch v := p.Decide(e); v.Decision {
		case si.DecisionRollback:
			return true, n, v.Reason
		case si.DecisionConfirm:
			return false, n, v.Reason
		}
	}
	return false, 10000, "no decision"
}

func TestQualitySimulation(t *testing.T) {
	n := simN
	if raceEnabled || testing.Short() {
		n = simN / 10
	}
	p := si.RollbackPolicy{}
	type row struct {
		name             string
		drop, cost       float64
		look             int     // calls within which a rollback counts
		maxRate, minRate float64 // bounds on the share rolled back within look
	}
	rows := []row{
		{"harmless", 0, 1, 10000, 0.01, 0},
		{"quality −0.10", 0.10, 1, 200, 1, 0.90},
		{"quality −0.15", 0.15, 1, 120, 1, 0.90},
		{"equal quality, 5× the cost", 0, 5, 20, 1, 1},
	}
	for i, rw := range rows {
		r := rand.New(rand.NewPCG(uint64(i+1), 30))
		within, rolled := 0, 0
		var callsTo []float64
		for range n {
			rb, calls, reason := qualityTrial(r, p, rw.drop, rw.cost)
			if rb {
				rolled++
				if calls <= rw.look {
					within++
				}
				if rw.cost > 1 && !strings.Contains(reason, "cost per successful call rose") {
					t.Fatalf("%s: rolled back for %q", rw.name, reason)
				}
			}
			callsTo = append(callsTo, float64(calls))
		}
		share := float64(within) / float64(n)
		t.Logf("%s: rolled back %.2f%% (within %d scored calls: %.2f%%), median calls to a decision %.0f",
			rw.name, 100*float64(rolled)/float64(n), rw.look, 100*share, median(callsTo))
		if share < rw.minRate {
			t.Errorf("%s: %.2f%% rolled back within %d calls, want at least %.0f%%", rw.name, 100*share, rw.look, 100*rw.minRate)
		}
		if share > rw.maxRate {
			t.Errorf("%s: %.2f%% rolled back, want at most %.0f%%", rw.name, 100*share, 100*rw.maxRate)
		}
	}
}

// BenchmarkSuccessScored is a successful call that scores itself and
// reports its cost: the score slot from the pool, the locked booking.
func BenchmarkSuccessScored(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	fn := func(ctx context.Context, _ si.Config) error {
		si.AddCost(ctx, 1)
		return l.AddScore(ctx, 0.8)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", fn)
	}
}

// BenchmarkScoreByID scores a call by its ID, each score with a key of
// its own, so that each counts (a call ID counts once: see
// Loop.ScoreCall).
func BenchmarkScoreByID(b *testing.B) {
	l := newLoop(b)
	rep, _ := l.ExecuteWithImprovement(context.Background(), "agent", work)
	b.ReportAllocs()
	key := uint64(0)
	for b.Loop() {
		key++
		if res, err := l.ScoreCall("agent", rep.ID, 0.8, key); err != nil || res.Duplicate {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkSuccessSlots is the hot path, a call that reports neither
// score nor cost: BenchmarkSuccess, now that every call carries its
// score slot (before, only once the process had turned the slots on).
func BenchmarkSuccessSlots(b *testing.B) {
	l := newLoop(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}
