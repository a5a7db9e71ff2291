package selfimprove_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/scoresim"
)

// scored makes one successful call of id on replica r that scores itself
// score inside the call, or, when late, by Loop.Score after it returned,
// and reports cost.
func (e *fleetEnv) scored(r int, id string, score, cost float64, late bool) si.Report {
	e.t.Helper()
	l := e.reps[r]
	rep, err := l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
		e.clk.Advance(10 * time.Millisecond)
		si.AddCost(ctx, cost)
		if !late {
			if err := l.AddScore(ctx, score); err != nil {
				e.t.Errorf("AddScore: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if late {
		e.clk.Advance(time.Second)
		callID, _ := strconv.ParseUint(rep.CallID(), 16, 64)
		if err := l.Score(id, callID, score); err != nil {
			e.t.Fatalf("replica %d: Score: %v", r, err)
		}
	}
	return rep
}

// scoredChange runs, round robin over the replicas of a new fleetEnv of
// n, 40 calls of agent "a" scored 0.9 at a cost of 1 each, then failures
// until the strategy's change (route "b", version 2) is in force, then
// calls scored score at cost cost, a sync after each, until the change is
// rolled back everywhere. It returns the scored calls the change took.
func scoredChange(t *testing.T, n int, score, cost float64, late bool) int {
	t.Helper()
	e := newFleetEnv(t, n, &countingStrategy{tweak: si.Config{Route: "b"}})
	for _, l := range e.reps {
		scoringOn(t, l)
	}
	if err := e.reps[0].SetThreshold("a", manual(2)); err != nil {
		t.Fatal(err)
	}
	i := 0
	for ; i < 40; i++ {
		e.scored(i%n, "a", 0.9, 1, late)
		e.sync()
	}
	for e.reps[0].Config("a").Version == 1 {
		if i > 100 {
			t.Fatal("no change applied")
		}
		e.call(i%n, "a", errBoom)
		e.sync()
		i++
	}
	e.wantVersions("a", 2)
	calls := 0
	for e.reps[0].Config("a").Version == 2 {
		if calls >= 150 {
			t.Fatalf("the change was not rolled back after %d scored calls over %d replicas", calls, n)
		}
		if rep := e.scored(i%n, "a", score, cost, late); rep.Confirmed != nil {
			t.Fatalf("confirmed: %s", rep.Confirmed.Verdict)
		}
		e.sync()
		i++
		calls++
	}
	e.wantVersions("a", 1)
	e.sync()
	// Every replica's records hold the scores and costs of every replica,
	// once: all of version 1's; of version 2, all but those that reached
	// the fleet after the rollback (at most one a replica), which stay
	// with the replica that made them.
	for r, l := range e.reps {
		v, _ := l.View("a")
		v1, v2 := v.Versions[1], v.Versions[2]
		if v1.Scored != 40 || v1.Costed != 40 || v2.Scored > calls || v2.Costed > calls || v2.Scored < calls-n || v2.Costed < calls-n {
			t.Fatalf("replica %d's records: version 1 %d scored, %d costed (want 40), version 2 %d and %d (want %d, or up to %d fewer)",
				r, v1.Scored, v1.Costed, v2.Scored, v2.Costed, calls, n)
		}
	}
	if chs := e.reps[n-1].Changes("a"); len(chs) != 1 || chs[0].State != si.ChangeRolledBack {
		t.Fatalf("changes: %+v", chs)
	} else {
		t.Logf("%d replicas: rolled back after %d scored calls: %s", n, calls, chs[0].Verdict)
	}
	return calls
}

// TestFleetPoolsScoresAndCosts: three replicas, each scoring a third of
// the calls, roll a change that lowers quality (or raises the cost) back
// after no more scored calls in all than one replica alone needs: the
// scores and costs, made in the call or later by call ID, are pooled like
// the counts.
func TestFleetPoolsScoresAndCosts(t *testing.T) {
	for _, c := range []struct {
		name        string
		score, cost float64
		late        bool
	}{
		{"quality", 0.6, 1, false},
		{"quality scored late", 0.6, 1, true},
		{"cost", 0.9, 5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			one := scoredChange(t, 1, c.score, c.cost, c.late)
			three := scoredChange(t, 3, c.score, c.cost, c.late)
			if three > one+1 {
				t.Fatalf("three replicas rolled back after %d scored calls, one after %d: scores are not pooled", three, one)
			}
		})
	}
}

// watchedFall runs, round robin over the replicas of a new fleetEnv of
// n, healthy calls of agent "bot" on route "primary" scored with mean
// 0.85 (σ 0.25), then calls scored with mean 0.60, a sync after each,
// until the agent leaves the primary. It returns the calls after the fall.
func watchedFall(t *testing.T, n int, seed uint64) int {
	t.Helper()
	e := newFleetEnv(t, n, &si.BuiltinStrategy{}, si.WithRollbackPolicy(si.RollbackPolicy{}),
		si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"fallback"}}))
	for _, l := range e.reps {
		scoringOn(t, l)
	}
	r := rand.New(rand.NewPCG(seed, 30))
	mean := 0.85
	call := func(i int) {
		e.clk.Advance(10 * time.Second)
		l := e.reps[i%n]
		score := scoresim.Beta(r, mean, 0.25)
		if _, err := l.ExecuteWithImprovement(context.Background(), "bot", func(ctx context.Context, _ si.Config) error {
			e.clk.Advance(100 * time.Millisecond)
			return l.AddScore(ctx, score)
		}); err != nil {
			t.Fatal(err)
		}
		e.sync()
	}
	for i := range 500 {
		call(i)
	}
	if e.reps[0].Config("bot").Version != 1 {
		t.Fatalf("seed %d: healthy calls changed the config", seed)
	}
	mean = 0.60
	for i := range 1000 {
		call(500 + i)
		if e.reps[0].Config("bot").Route == "fallback" {
			return i + 1
		}
	}
	t.Fatalf("seed %d: %d replicas: no move after 1000 calls at 0.60", seed, n)
	return 0
}

// TestFleetWatchesPooledScores: the watch of the mean score sees the
// fleet's scores: three replicas, each scoring a third of the calls,
// leave a primary whose quality fell after as many calls in all as one
// loop alone, give or take the call that brings the others' scores.
func TestFleetWatchesPooledScores(t *testing.T) {
	const seeds = 5
	var one, three int
	for seed := range uint64(seeds) {
		a, b := watchedFall(t, 1, seed+1), watchedFall(t, 3, seed+1)
		t.Logf("seed %d: moved after %d calls on one replica, %d over three", seed+1, a, b)
		one, three = one+a, three+b
	}
	if three > one+seeds {
		t.Fatalf("three replicas moved after %d calls in all (5 seeds), one after %d: the watch does not see the fleet's scores", three, one)
	}
}

// TestFleetScoresAfterRestart: a replica restarted on its store in the
// middle of a generation does not book again the scores its records
// already hold (its own before the restart, and the others' it had
// booked); a new replica books the others' scores of the generation.
func TestFleetScoresAfterRestart(t *testing.T) {
	e := newFleetEnv(t, 2, nil)
	for _, l := range e.reps {
		scoringOn(t, l)
	}
	for i := range 20 {
		e.scored(i%2, "a", 0.8, 1, false)
		e.sync()
	}
	store := si.NewRAMStore()
	e.opts = []si.Option{si.WithStore(store)}
	e.add() // a new replica, on a store of its own
	scoringOn(t, e.reps[2])
	e.scored(2, "a", 0.8, 1, false)
	e.sync()
	e.sync()
	if err := e.reps[2].Close(); err != nil {
		t.Fatal(err)
	}
	e.reps[2] = e.add() // restarted on the same store
	e.reps = e.reps[:3]
	scoringOn(t, e.reps[2])
	e.scored(2, "a", 0.8, 1, false)
	e.sync()
	e.sync()
	for r, l := range e.reps {
		if v, _ := l.View("a"); v.Versions[1].Scored != 22 || v.Versions[1].Costed != 22 {
			t.Errorf("replica %d's record: %d scores, %d costs; 22 were made", r, v.Versions[1].Scored, v.Versions[1].Costed)
		}
	}
}
