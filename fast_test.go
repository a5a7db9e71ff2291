package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// fastScript drives one agent through 4,000 calls on a fake clock: noise,
// two faults, tweaks that help and one that harms, gaps that cross the
// window's and the day counter's buckets. It returns what each call
// reported and the agent's final stats and changes.
func fastScript(t *testing.T, noFast bool) ([]string, Stats, []string) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 5, 4, 23, 50, 0, 0, time.UTC))
	tries := 0
	strat := StrategyFunc(func(_ context.Context, a Analysis) (*Tweak, error) {
		tries++
		c := a.Config
		c.Route = []string{"harmful", "backup", "mirror"}[tries%3]
		return &Tweak{Config: c, Reason: "try " + c.Route}, nil
	})
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithNotifier(nil), WithLogger(discardLogger()), WithRetryPolicy(RetryPolicy{TransientAttempts: 1}),
		WithStrategy(strat), WithDefaultConfig(Config{Route: "primary"}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetThreshold("a", Threshold{Failures: 3, Window: 10 * time.Minute, Cooldown: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var out []string
	for i := range 4000 {
		fault := i >= 1000 && i < 1600 || i >= 2500 && i < 3000
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c Config) error {
			p := 0.98
			switch {
			case c.Route == "harmful":
				p = 0.3
			case fault && c.Route == "primary":
				p = 0.4
			}
			if noFast {
				closeFastPath(l, "a")
			}
			if rng.Float64() < p {
				clk.Advance(20 * time.Millisecond)
				return nil
			}
			clk.Advance(5 * time.Millisecond)
			return errors.New("upstream 503")
		})
		if noFast && fastHolds(l, "a") {
			t.Fatalf("call %d booked without the lock", i)
		}
		out = append(out, fmt.Sprintf("v%d ok=%v applied=%v rolled=%v confirmed=%v", rep.ConfigVersion, rep.Success,
			rep.Improvement != nil, rep.Rollback != nil, rep.Confirmed != nil))
		gap := time.Duration(rng.IntN(3000)) * time.Millisecond
		if rng.IntN(50) == 0 {
			gap = time.Duration(rng.IntN(40)) * time.Minute
		}
		clk.Advance(gap)
	}
	var changes []string
	for _, c := range l.Changes("a") {
		changes = append(changes, fmt.Sprintf("v%d->v%d %s %s", c.From.Version, c.To.Version, c.State, c.Verdict))
	}
	return out, l.Stats("a"), changes
}

// closeFastPath closes agent id's lock-free success path, as a settle
// does, so that the call running now books under the lock; the lock
// holder opens it again. With it, a script takes the locked path on every
// call without a switch in the Loop.
func closeFastPath(l *Loop, id string) {
	if v, ok := l.agents.Load(id); ok {
		v.(*agent).fast.until.Store(0)
	}
}

// fastHolds reports whether agent id's lock-free counters hold calls not
// yet settled.
func fastHolds(l *Loop, id string) bool {
	v, ok := l.agents.Load(id)
	if !ok {
		return false
	}
	a := v.(*agent)
	var calls [len(latencyBounds) + 1]uint64
	var lat int64
	a.fast.collect(&a.tel.live, &calls, &lat, fastPeek)
	return lat != 0 || calls != [len(calls)]uint64{}
}

// TestFastPathDecidesAlike: the calls booked without the lock lead to the
// same decisions, on the same calls, with the same stats and verdicts, as
// when every call takes the lock.
func TestFastPathDecidesAlike(t *testing.T) {
	lockedOut, lockedStats, lockedChanges := fastScript(t, true)
	fastOut, fastStats, fastChanges := fastScript(t, false)
	for i := range lockedOut {
		if lockedOut[i] != fastOut[i] {
			t.Fatalf("call %d: locked path %s, fast path %s", i, lockedOut[i], fastOut[i])
		}
	}
	if lockedStats != fastStats {
		t.Fatalf("stats:\nlocked %+v\nfast   %+v", lockedStats, fastStats)
	}
	if fmt.Sprint(lockedChanges) != fmt.Sprint(fastChanges) {
		t.Fatalf("changes:\nlocked %q\nfast   %q", lockedChanges, fastChanges)
	}
	if len(lockedChanges) < 4 {
		t.Fatalf("the script made %d changes: %q", len(lockedChanges), lockedChanges)
	}
	t.Logf("%d changes: %q", len(fastChanges), fastChanges)
}

// TestFastPathCountsEveryCall: many goroutines calling one agent at once
// (it turns hot) lose no call, and the counts survive a save and a load.
func TestFastPathCountsEveryCall(t *testing.T) {
	store := NewRAMStore()
	l, err := New(WithStore(store), WithNotifier(nil), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 2000
	ok := func(context.Context, Config) error { return nil }
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				l.ExecuteWithImprovement(context.Background(), "hot", ok)
			}
		})
	}
	// Readers settle while the calls book.
	for range 20 {
		_ = l.Stats("hot")
	}
	wg.Wait()
	for m := range l.Views() {
		if m.Successes != workers*each || m.Latency.Count != workers*each || m.Failures != 0 {
			t.Fatalf("metrics: %d successes, %d in the histogram, %d failures; want %d successes",
				m.Successes, m.Latency.Count, m.Failures, workers*each)
		}
	}
	if got := l.Stats("hot"); got.TotalCalls != workers*each || got.Calls != workers*each || got.Failures != 0 {
		t.Fatalf("stats %+v, want %d calls", got, workers*each)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := New(WithStore(store), WithNotifier(nil), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := l2.Stats("hot").TotalCalls; got != workers*each {
		t.Fatalf("after a reload: %d calls, want %d", got, workers*each)
	}
}

// TestFastPathBuckets: calls booked without the lock land in the window's
// bucket and the day counter's bucket they ended in, and a failure counts
// after the successes before it.
func TestFastPathBuckets(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC))
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithNotifier(nil), WithLogger(discardLogger()), WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	call := func(fail bool) {
		l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error {
			clk.Advance(time.Millisecond)
			if fail {
				return errors.New("boom")
			}
			return nil
		})
	}
	// Buckets of a second; no analysis.
	if err := l.SetThreshold("a", Threshold{Failures: 64, Window: 64 * time.Second, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	call(false) // the first call opens the fast path
	for b := range 3 {
		clk.Advance(time.Second)
		for range 5 + b {
			call(false)
		}
		call(true)
	}
	l.view("a", func(s *agentState) {
		var got []uint32
		for i := int64(3); i >= 0; i-- {
			sl := s.Tracker.Win.Slots[(s.Tracker.Win.Head-i)%windowSlots]
			got = append(got, sl.Calls, sl.Failures)
		}
		if want := []uint32{1, 0, 6, 1, 7, 1, 8, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("buckets (calls, failures), oldest first: %v, want %v", got, want)
		}
		if s.Tracker.Total != 22 || s.Tracker.Consec != 1 {
			t.Errorf("total %d, consecutive %d", s.Tracker.Total, s.Tracker.Consec)
		}
		// The last call is a failure, the 7 before it successes.
		st := s.Tracker.regime(0, 8)
		if st.Calls != 8 || st.Failures != 1 || s.Tracker.CallFail&(1<<((s.Tracker.CallPos+15)%16)) == 0 {
			t.Errorf("recent regime %+v, fail bits %016b at %d", st, s.Tracker.CallFail, s.Tracker.CallPos)
		}
		// The successes count as ended before the failure after them, and
		// after the failure before them.
		last := (int(s.Tracker.CallPos) + 15) % 16
		for k := 1; k <= 7; k++ {
			i := (last - k + 16) % 16
			if e := s.Tracker.CallEnd[i]; e >= s.Tracker.CallEnd[last] || e <= s.Tracker.CallEnd[(last-8+16)%16] {
				t.Errorf("success %d before the last failure ended at %d, outside (%d, %d)", k, e,
					s.Tracker.CallEnd[(last-8+16)%16], s.Tracker.CallEnd[last])
			}
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestFastShardFillsCacheLines: a hot agent's counters sit on cache lines
// of their own.
func TestFastShardFillsCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(fastShard{}); n%64 != 0 {
		t.Fatalf("a counter takes %d bytes, not a whole number of 64-byte lines", n)
	}
}
