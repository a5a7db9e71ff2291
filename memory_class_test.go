package selfimprove_test

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestSimilarByClassKeyword reproduces issue 32: 30 timeouts remembered
// as "context deadline exceeded", and `similar timeout` found nothing.
// A query that names a class finds its clusters; whole messages still
// rank by their words; Confidence is rounded to a readable figure.
func TestSimilarByClassKeyword(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithStrategy(nil), noFloor, si.WithMemory(si.MemoryOptions{HalfLife: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fail := func(id string, err error) {
		l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return err })
	}
	for range 30 {
		fail("search", context.DeadlineExceeded)
	}
	fail("billing", failure.BadOutput(errOf("output does not match schema")))
	fail("billing", errOf("429 Too Many Requests: rate limit reached for requests"))
	for _, c := range []struct {
		q     string
		class failure.Class
		sim   float64
	}{
		{"timeout", failure.ClassTimeout, 0.5},
		{"Timeouts", failure.ClassTimeout, 0.5},
		{"rate limit", failure.ClassRateLimit, 0}, // shares words with the message: ranked by them
		{"bad_output", failure.ClassBadOutput, 0.5},
		{"context deadline exceeded", failure.ClassTimeout, 1},
	} {
		got := l.Similar(c.q, 3)
		if len(got) == 0 || got[0].Class != c.class || c.sim > 0 && got[0].Similarity != c.sim {
			t.Errorf("Similar(%q) = %+v, want first a %s cluster (similarity %v)", c.q, got, c.class, c.sim)
		}
	}
	if got := l.Similar("quota", 3); len(got) != 0 {
		t.Errorf("Similar(quota) = %+v, want none: no quota cluster", got)
	}
	clk.Advance(40 * time.Hour) // 40 half-lives: a confidence of 1e-12
	if got := l.Similar("context deadline exceeded", 1); len(got) != 1 || got[0].Confidence != 0 {
		t.Errorf("after 40 half-lives: %+v, want confidence rounded to 0", got)
	}
}

type errOf string

func (e errOf) Error() string { return string(e) }
