package redisfleet_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestPooledScores: three replicas on a real Redis score their calls,
// inside the call and later by call ID, and report costs, all at once;
// the fleet's pooled scores and costs are those made, each once, and
// every replica's record of the version holds all of them.
func TestPooledScores(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 3)
	ctx := context.Background()
	const id, calls = "grader", 60
	var (
		mu                  sync.Mutex
		scored, costed      int64
		sum, squares, costs float64
		wg                  sync.WaitGroup
	)
	book := func(score, cost float64) {
		mu.Lock()
		defer mu.Unlock()
		if score >= 0 {
			scored++
			sum += score
			squares += score * score
		}
		if cost >= 0 {
			costed++
			costs += cost
		}
	}
	for r, l := range ls {
		if err := l.AddScore(ctx, 0.5); !errors.Is(err, si.ErrUnknownCall) { // outside a call
			t.Fatalf("AddScore outside a call = %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				score, cost := float64((r*7+i)%11)/10, 0.001*float64(i%5+1)
				rep, err := l.ExecuteWithImprovement(ctx, id, func(ctx context.Context, _ si.Config) error {
					si.AddCost(ctx, cost)
					return l.AddScore(ctx, score)
				})
				if err != nil {
					t.Errorf("replica %d: %v", r, err)
					return
				}
				book(score, cost)
				if i%3 == 0 { // a grader's later score: another sample
					callID, _ := strconv.ParseUint(rep.CallID(), 16, 64)
					// A key each: calls ending in one millisecond share an ID.
					if _, err := l.ScoreCall(id, callID, 1-score, uint64(r)<<32|uint64(i+1)); err != nil {
						t.Errorf("replica %d: Score: %v", r, err)
						return
					}
					book(1-score, -1)
				}
			}
		}()
	}
	wg.Wait()
	for range 2 { // the second brings every replica the others' last deltas
		for r, l := range ls {
			if err := l.SyncFleet(ctx); err != nil {
				t.Fatalf("replica %d: SyncFleet: %v", r, err)
			}
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*(1+math.Abs(b)) }
	ps, err := newFleet(t, client(t, s), "loop:").Add(ctx, []si.FleetDelta{{AgentID: id}}) // reads
	if err != nil {
		t.Fatal(err)
	}
	tot := ps[0].Total
	t.Logf("made: %d scores (sum %.4f), %d costs (%.4f); pooled: %d scores (sum %.4f), %d costs (%.4f)",
		scored, sum, costed, costs, tot.Scored, tot.ScoreSum, tot.Costed, tot.Cost)
	if tot.Calls != 3*calls || tot.Scored != scored || !near(tot.ScoreSum, sum) || !near(tot.ScoreSquares, squares) ||
		tot.Costed != costed || tot.CostOK != costed || !near(tot.Cost, costs) || ps[0].Err != nil {
		t.Fatalf("pooled %+v (%v), want %d calls, %d scores summing %v (squares %v), %d costs summing %v",
			tot, ps[0].Err, 3*calls, scored, sum, squares, costed, costs)
	}
	for r, l := range ls {
		v, _ := l.View(id)
		wantRecord(t, r, v.Versions[1], scored, costed, sum, costs)
	}
}

// wantRecord fails the test unless got, replica r's record of a version,
// holds the scored scores summing sum and the costed costs summing costs.
func wantRecord(t *testing.T, r int, got si.Stats, scored, costed int64, sum, costs float64) {
	t.Helper()
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*(1+math.Abs(b)) }
	if got.Scored != int(scored) || got.Costed != int(costed) || !near(got.Quality, sum/float64(scored)) || !near(got.Cost, costs) {
		t.Fatalf("replica %d's record of version 1: %d scores (mean %v), %d costs (%v); want %d (%v), %d (%v)",
			r, got.Scored, got.Quality, got.Costed, got.Cost, scored, sum/float64(scored), costed, costs)
	}
}

// TestHostileScores plants scores and costs no replica writes in an
// agent's counts (a sum that is no number, one past 1e300, a negative
// cost, scores summing more than their count, squares more than the
// sum): the counts are set aside and the pool says so, and counting
// starts again from the next delta.
func TestHostileScores(t *testing.T) {
	s := startRedis(t)
	admin := client(t, s)
	f := newFleet(t, client(t, s), "q:")
	ctx := context.Background()
	good := si.FleetCounts{Calls: 1, Scored: 1, ScoreSum: 0.5, ScoreSquares: 0.25, Costed: 1, CostOK: 1, Cost: 0.01}
	for i, bad := range [][]string{
		{"cs", "nan"}, {"tz", "1e400"}, {"kz", "-1"}, {"cs", "5", "cn", "2"}, {"tq", "0.9", "ts", "0.5", "tn", "1"}, {"cs", "x"},
	} {
		id := "a" + strconv.Itoa(i)
		if _, err := f.Add(ctx, []si.FleetDelta{{AgentID: id, Gen: 1, Change: good}}); err != nil {
			t.Fatal(err)
		}
		n := agentKey("q:", id, "n")
		if err := admin.HSet(ctx, n, bad).Err(); err != nil {
			t.Fatal(err)
		}
		ps, err := f.Add(ctx, []si.FleetDelta{{AgentID: id, Gen: 1, Change: good}})
		if err != nil {
			t.Fatal(err)
		}
		if p := ps[0]; p.Err == nil || p.Total != good || p.Change != good {
			t.Fatalf("%v planted: pool %+v (%v), want the new delta alone and an error", bad, p.Total, p.Err)
		}
		if admin.Exists(ctx, n+"-bad").Val() != 1 {
			t.Fatalf("%v planted: the counts were not set aside", bad)
		}
	}
}
