package fleettest

import (
	"context"
	"math"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// testPooledScores checks that Add pools the scores and costs of each arm
// like the counts: summed over the replicas, a numbered delta once, a
// delta of scores without calls leaving the run of failures as it was, a
// later generation starting the arms again while the total goes on.
func testPooledScores(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	q := func(calls, failures, scored int64, sum, squares float64, costed, ok int64, cost float64) si.FleetCounts {
		return si.FleetCounts{Calls: calls, Failures: failures, Consecutive: failures, Scored: scored, ScoreSum: sum, ScoreSquares: squares,
			Costed: costed, CostOK: ok, Cost: cost}
	}
	d := si.FleetDelta{AgentID: "a", Replica: "r1", Gen: 2, Batch: 1,
		Change: q(3, 1, 2, 0.1+0.7, 0.01+0.49, 3, 2, 0.003), Control: q(1, 0, 1, 0.9, 0.81, 1, 1, 0.001)}
	for range 2 { // sent twice, booked once
		if _, err := f.Add(ctx, []si.FleetDelta{d}); err != nil {
			t.Fatal(err)
		}
	}
	// A later score, without calls: the run of failures stays 1.
	e := si.FleetDelta{AgentID: "a", Replica: "r2", Gen: 2, Batch: 1, Change: si.FleetCounts{Scored: 1, ScoreSum: 0.25, ScoreSquares: 0.0625}}
	ps, err := g.Add(ctx, []si.FleetDelta{e})
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	wantChange := q(3, 1, 3, 0.1+0.7+0.25, 0.01+0.49+0.0625, 3, 2, 0.003)
	wantControl := q(1, 0, 1, 0.9, 0.81, 1, 1, 0.001)
	wantTotal := q(4, 1, 4, 0.1+0.7+0.9+0.25, 0.01+0.49+0.81+0.0625, 4, 3, 0.004)
	wantTotal.Consecutive = 0 // the control's success ended the run
	for _, c := range []struct {
		name      string
		got, want si.FleetCounts
	}{{"change", p.Change, wantChange}, {"control", p.Control, wantControl}, {"total", p.Total, wantTotal}} {
		if !sameCounts(c.got, c.want) {
			t.Errorf("pooled %s %+v, want %+v", c.name, c.got, c.want)
		}
	}
	// A later generation starts the arms again; the total goes on.
	ps, err = f.Add(ctx, []si.FleetDelta{{AgentID: "a", Replica: "r1", Gen: 3, Batch: 2, Change: q(1, 0, 1, 0.5, 0.25, 1, 1, 0.002)}})
	if err != nil {
		t.Fatal(err)
	}
	if p := ps[0]; p.Change.Scored != 1 || p.Change.ScoreSum != 0.5 || p.Change.Cost != 0.002 || p.Total.Scored != 5 || p.Total.Costed != 5 {
		t.Fatalf("next generation: change %+v, total %+v", p.Change, p.Total)
	}
}

// sameCounts reports whether a and b are equal, their float sums within
// rounding.
func sameCounts(a, b si.FleetCounts) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-12*(1+math.Abs(y)) }
	fa, fb := a, b
	fa.ScoreSum, fa.ScoreSquares, fa.Cost, fb.ScoreSum, fb.ScoreSquares, fb.Cost = 0, 0, 0, 0, 0, 0
	return fa == fb && near(a.ScoreSum, b.ScoreSum) && near(a.ScoreSquares, b.ScoreSquares) && near(a.Cost, b.Cost)
}
