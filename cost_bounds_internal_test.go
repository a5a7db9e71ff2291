package selfimprove

import (
	"context"
	"math"
	"testing"
	"time"
)

// Costs out of range never make a state that cannot be saved. Before, two
// AddCost(ctx, 1e308) in one call booked +Inf: the agent's state never
// saved again and its page answered 500; and two other replicas' records
// of 1e308 added up to +Inf the same way.
func TestCostsStayFinite(t *testing.T) {
	c := &scoreCtx{Context: context.Background()}
	noteCost(c, 1e308)
	c.addCost(9e11)
	c.addCost(9e11)
	if q := c.release(); q.cost != maxRecordCost || !q.costed {
		t.Errorf("a call's costs: %+v, want its sum stopped at %g", q, maxRecordCost)
	}

	st := newState("a", Config{Version: 1})
	for _, f := range []FleetCounts{
		{Costed: 2, Cost: math.Inf(1), Scored: 1, ScoreSum: math.NaN(), ScoreSquares: 1},
		{Costed: 1, Cost: 1e308, Scored: 1, ScoreSum: 1e300, ScoreSquares: 1e300},
		{Costed: 1, Cost: 5, CostOK: 1, Scored: 1, ScoreSum: 0.5, ScoreSquares: 0.25},
	} {
		st.bookPooled(st.Gen, [2]FleetCounts{f}, time.Unix(0, 0), &ruleBook{}, &effects{})
	}
	if _, err := encodeState(&st); err != nil {
		t.Fatalf("the state does not save: %v", err)
	}
	r := st.qualityOf(1)
	if r == nil || r.Cost != 5 || r.Costed != 1 || r.Scored != 1 || r.Sum != 0.5 {
		t.Fatalf("pooled records booked: %+v, want only the one in range", r)
	}
}
