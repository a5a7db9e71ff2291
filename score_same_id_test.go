package selfimprove_test

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestScoresOfCallsSharingAnID: calls of an agent that end within the same
// millisecond under the same version share a call ID, and a score by that
// ID without a key is a sample like any: 100 calls, ten a millisecond,
// scored 0 and 1 in turn, are 100 samples of mean 0.5. Before, the call ID
// was the score's idempotency key: 20 were booked (the first 0 and the
// first 1 of each millisecond), the others dropped with a nil error.
func TestScoresOfCallsSharingAnID(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ids []uint64
	for i := range 100 {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
		ids = append(ids, rep.ID)
		if i%10 == 9 {
			clk.Advance(1100 * time.Microsecond)
		}
	}
	if ids[0] != ids[1] {
		t.Fatalf("two calls in the same millisecond: IDs %x and %x (the test's premise: they share one)", ids[0], ids[1])
	}
	for i, id := range ids {
		if err := l.Score("a", id, float64(i%2)); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := l.View("a"); v.Versions[1].Scored != 100 || v.Versions[1].Quality != 0.5 {
		t.Errorf("100 calls scored by ID: %d booked, mean %v; want 100, 0.5", v.Versions[1].Scored, v.Versions[1].Quality)
	}
}
