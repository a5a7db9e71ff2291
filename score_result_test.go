package selfimprove_test

import (
	"math"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestScoreCountsOnce: a score retried with its key (a grader's retry)
// counts once, and the retry is answered as a duplicate, not an error;
// without a key each score is a sample (the call ID is no key:
// TestScoresOfCallsSharingAnID); the memory of keys is bounded
// (MaxScoreKeys), beyond which a retry counts again. Before, each score
// was a sample: the retry counted twice.
func TestScoreCountsOnce(t *testing.T) {
	e := newEnv(t)
	rep := e.call("a", nil, 5*time.Millisecond)
	scored := func(want int, mean float64) {
		t.Helper()
		v, _ := e.l.View("a")
		if got := v.Versions[1]; got.Scored != want || mean >= 0 && math.Abs(got.Quality-mean) > 1e-9 {
			t.Fatalf("version 1: %d scores, mean %v; want %d, %v", got.Scored, got.Quality, want, mean)
		}
	}
	res, err := e.l.ScoreCall("a", rep.ID, 0.8, 5)
	if err != nil || res.Duplicate || res.Version != 1 {
		t.Fatalf("first score: %+v, %v", res, err)
	}
	res, err = e.l.ScoreCall("a", rep.ID, 0.8, 5)
	if err != nil || !res.Duplicate || res.Version != 1 {
		t.Fatalf("the retry: %+v, %v; want a duplicate of version 1, no error", res, err)
	}
	if res, err := e.l.ScoreCall("a", rep.ID, 0.2, 5); err != nil || !res.Duplicate {
		t.Fatalf("a retry with another score: %+v, %v; want a duplicate (the first stands)", res, err)
	}
	scored(1, 0.8)
	// Another key: another sample; its retry counts once.
	if res, err := e.l.ScoreCall("a", rep.ID, 0.4, 7); err != nil || res.Duplicate {
		t.Fatalf("a score with a key of its own: %+v, %v", res, err)
	}
	if res, err := e.l.ScoreCall("a", rep.ID, 0.4, 7); err != nil || !res.Duplicate {
		t.Fatalf("its retry: %+v, %v", res, err)
	}
	scored(2, 0.6)
	// Without a key, each score is a sample: the call ID is no key.
	if res, err := e.l.ScoreCall("a", rep.ID, 0.6, 0); err != nil || res.Duplicate {
		t.Fatalf("a score without a key: %+v, %v", res, err)
	}
	scored(3, 0.6)
	// The bound: MaxScoreKeys other scores later, the ID is forgotten.
	for k := range uint64(si.MaxScoreKeys) {
		if res, err := e.l.ScoreCall("a", rep.ID, 0.5, 1000+k); err != nil || res.Duplicate {
			t.Fatalf("key %d: %+v, %v", 1000+k, res, err)
		}
	}
	scored(3+si.MaxScoreKeys, -1)
	if res, err := e.l.ScoreCall("a", rep.ID, 0.5, 5); err != nil || res.Duplicate {
		t.Fatalf("a retry beyond the bound: %+v, %v; want it counted", res, err)
	}
	scored(4+si.MaxScoreKeys, -1)
	// Refused scores take no key: the call is scored once it can be.
	if _, err := e.l.ScoreCall("a", rep.ID, 1.5, 99); err == nil {
		t.Fatal("a score of 1.5 was taken")
	}
	if res, err := e.l.ScoreCall("a", rep.ID, 0.5, 99); err != nil || res.Duplicate {
		t.Fatalf("a score after a refused one: %+v, %v", res, err)
	}
}

// TestScoreCallSaysDecision: a late score that decides the change under
// verification says so: the change it rolled back, with the version the
// score was credited to. Before, Score returned nil alike for a score
// that decided and one that did not.
func TestScoreCallSaysDecision(t *testing.T) {
	e := qualityEnv(t)
	var ids []uint64
	for range 30 {
		ids = append(ids, e.scoredCall("a", -1, -1, 2*time.Millisecond).ID)
	}
	for i, id := range ids {
		res, err := e.l.ScoreCall("a", id, 0.5, 0)
		if err != nil || res.Duplicate || res.Version != 2 {
			t.Fatalf("score %d: %+v, %v", i+1, res, err)
		}
		if res.Confirmed != nil || res.Applied != nil || res.Analysis {
			t.Fatalf("score %d decided otherwise: %+v", i+1, res)
		}
		if c := e.l.Config("a"); c.Version == 1 {
			ch := res.RolledBack
			if ch == nil || ch.State != si.ChangeRolledBack || ch.To.Version != 2 {
				t.Fatalf("the score that rolled the change back says %+v", res)
			}
			return
		} else if res.RolledBack != nil {
			t.Fatalf("score %d says it rolled back %s, and v%d is in force", i+1, res.RolledBack.ID, c.Version)
		}
	}
	t.Fatal("30 late scores of 0.5 against 0.9 did not roll the change back")
}

// TestScoreCallSaysConfirmed: the late score that completes a
// change's verification says it confirmed it.
func TestScoreCallSaysConfirmed(t *testing.T) {
	e := qualityEnv(t)
	for i := range 400 {
		rep := e.scoredCall("a", -1, 1, 2*time.Millisecond)
		if rep.Confirmed != nil || rep.Rollback != nil {
			t.Fatalf("call %d decided before any score: %+v", i+1, rep)
		}
		res, err := e.l.ScoreCall("a", rep.ID, 0.9, 0)
		if err != nil || res.RolledBack != nil {
			t.Fatalf("score %d: %+v, %v", i+1, res, err)
		}
		if ch := res.Confirmed; ch != nil {
			if ch.State != si.ChangeConfirmed || ch.To.Version != 2 || res.Version != 2 || e.l.Config("a").Version != 2 {
				t.Fatalf("confirmed: %+v", res)
			}
			return
		}
	}
	t.Fatal("a harmless change scored late was not confirmed in 400 calls")
}
