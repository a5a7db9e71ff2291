package redisfleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// syncTwice syncs every replica twice, so that each has every other's
// calls.
func syncTwice(t *testing.T, ls []*si.Loop) {
	t.Helper()
	for range 2 {
		for _, l := range ls {
			if err := l.SyncFleet(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sharing starts n Loops sharing the agent state in s.
func sharing(t *testing.T, s *server, n int, opts ...si.Option) []*si.Loop {
	t.Helper()
	var out []*si.Loop
	for range n {
		f := newFleet(t, client(t, s), "rv:")
		o := append([]si.Option{si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithNotifier(nil), si.WithLogger(quiet),
			si.WithFleetFlush(50*time.Millisecond, 1024), si.WithFleetTimeout(time.Second)}, opts...)
		l, err := si.New(o...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		out = append(out, l)
	}
	return out
}

// The run of failures is the fleet's: replica A's failures, each
// followed by a success, are no run on replica B, whose one failure then
// does not open the circuit (5 failures in a row). Before, B booked A's
// failures after A's successes, counted 5 in a row, and its breaker
// opened on its first failure.
func TestOtherReplicasFailuresAreNoRun(t *testing.T) {
	s := startRedis(t)
	ls := sharing(t, s, 2, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 5}))
	a, b := ls[0], ls[1]
	ctx := context.Background()
	boom := errors.New("boom")
	fine := func(context.Context, si.Config) error { return nil }
	bad := func(context.Context, si.Config) error { return boom }
	if err := a.SetThreshold("x", si.Threshold{Failures: 60, Window: time.Hour, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.ExecuteWithImprovement(ctx, "x", fine)
	syncTwice(t, ls)
	for range 5 {
		a.ExecuteWithImprovement(ctx, "x", bad)
		a.ExecuteWithImprovement(ctx, "x", fine)
	}
	syncTwice(t, ls)
	if c := b.Stats("x").ConsecutiveFailures; c != 0 {
		t.Errorf("replica B: %d consecutive failures; the fleet's last call succeeded", c)
	}
	b.ExecuteWithImprovement(ctx, "x", bad)
	if _, err := b.ExecuteWithImprovement(ctx, "x", fine); errors.Is(err, si.ErrCircuitOpen) {
		t.Errorf("replica B: the circuit opened after one failure: %v", err)
	}
}

// A burst of failures larger than the fleet keeps one by one (40 > 32)
// is counted whole on every replica: its calls and failures, without the
// texts of those beyond. Before, the other replica lost 8 calls.
func TestFailureBurstCountedWhole(t *testing.T) {
	s := startRedis(t)
	ls := sharing(t, s, 2)
	a, b := ls[0], ls[1]
	ctx := context.Background()
	if err := a.SetThreshold("burst", si.Threshold{Failures: 64, Window: time.Hour, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.ExecuteWithImprovement(ctx, "burst", ok)
	syncTwice(t, ls)
	for j := range 40 {
		a.ExecuteWithImprovement(ctx, "burst", func(context.Context, si.Config) error { return fmt.Errorf("boom %d", j%3) })
	}
	syncTwice(t, ls)
	for i, l := range ls {
		if st := l.Stats("burst"); st.Calls != 41 || st.Failures != 40 {
			t.Errorf("replica %d: %d calls, %d failures; 41 calls were made, 40 failed", i, st.Calls, st.Failures)
		}
	}
}
