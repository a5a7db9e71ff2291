package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// A score hours late is too late, however late: the ID's time field
// wraps every 4.9 hours, and its check covers the time's high bits.
// Before, a score 3 hours late was refused as "in the future" (a 404),
// and one 5 hours late was booked as if the call had just ended.
func TestLateScoreHoursLater(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, err := l.ExecuteWithImprovement(context.Background(), "bot", func(context.Context, si.Config) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	last := time.Duration(0)
	for _, after := range []time.Duration{90 * time.Minute, 3 * time.Hour, 4*time.Hour + 53*time.Minute, 5 * time.Hour, 5*time.Hour + 30*time.Minute, 9 * time.Hour, 50 * time.Hour} {
		clk.Advance(after - last)
		last = after
		err := l.Score("bot", rep.ID, 0.5)
		// Up to 9.8 hours it is found too late; later, unknown (an ID's
		// check looks back two wraps of its time field).
		if after < 9*time.Hour+45*time.Minute && !errors.Is(err, si.ErrScoreTooLate) || !errors.Is(err, si.ErrScoreTooLate) && !errors.Is(err, si.ErrUnknownCall) {
			t.Errorf("Score %v after the call: %v, want ErrScoreTooLate", after, err)
		}
	}
	if s := l.Stats("bot"); s.Scored != 0 {
		t.Errorf("Stats.Scored = %d after scores hours past the horizon, want 0", s.Scored)
	}
}

// A call cancelled by its caller is not booked at all: its Report
// carries no ID to score it by (0, an untracked call's). Before, a score
// by its ID was booked while its in-call score was dropped.
func TestIgnoredCallHasNoID(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	rep, _ := l.ExecuteWithImprovement(ctx, "a", func(ctx context.Context, _ si.Config) error {
		cancel()
		return ctx.Err()
	})
	if !rep.Ignored || rep.ID != 0 {
		t.Fatalf("a call its caller cancelled: Ignored %v, ID %x; want ignored, ID 0", rep.Ignored, rep.ID)
	}
	rec, err := l.Record(context.Background(), "a", si.Report{Err: context.Canceled, Ignored: true})
	if err != nil || rec.ID != 0 {
		t.Fatalf("Record of an ignored call: ID %x, %v; want 0", rec.ID, err)
	}
	if s := l.Stats("a").Scored; s != 0 {
		t.Fatalf("Scored %d", s)
	}
}

// A Loop on a ReadOnlyStore refuses a score, as it refuses every
// operator's mutation: it could book it in memory only. Before, ScoreCall
// returned a result and nil, and the score was lost.
func TestReadOnlyLoopRefusesScores(t *testing.T) {
	dir := t.TempDir()
	l, err := si.New(si.WithDir(dir), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
	if err := l.MarkCritical("a", false); err != nil { // saves the agent's state
		t.Fatal(err)
	}
	r := readOnlyLoop(t, dir)
	if res, err := r.ScoreCall("a", rep.ID, 0.5, 0); !errors.Is(err, si.ErrReadOnly) {
		t.Fatalf("ScoreCall on a read-only Loop: %+v, %v; want ErrReadOnly", res, err)
	}
	if s := r.Stats("a").Scored; s != 0 {
		t.Fatalf("Scored %d on the read-only Loop, want 0", s)
	}
	if err := l.Score("a", rep.ID, 0.5); err != nil {
		t.Fatalf("the owner's Score: %v", err)
	}
}
