package selfimprove

import (
	"context"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// A successful call that found its agent's fast path open, and books
// just as the agent is evicted (WithMaxAgents), is counted once, on the
// agent loaded again. (Found in review: the call booked in the evicted
// agent's counters after the eviction had settled and saved them, and
// was lost: Stats.Calls one below the calls that returned without
// Report.LoopErr.) The call is held between its check of the fast path
// and its booking by the hot agent's pool of counter sets, whose New
// waits for the eviction.
func TestCallBookedDuringEvictionIsCounted(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(nil),
		WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ok := func(context.Context, Config) error { return nil }
	if rep, _ := l.ExecuteWithImprovement(context.Background(), "a", ok); rep.LoopErr != nil {
		t.Fatal(rep.LoopErr)
	}
	v, _ := l.agents.Load("a")
	a := v.(*agent)
	if a.fast.until.Load() == 0 {
		t.Fatal("the fast path is closed after a first call")
	}
	h := &hotShards{}
	entered, release := make(chan struct{}), make(chan struct{})
	h.pool.New = func() any {
		close(entered) // the call found the path open, and books now
		<-release
		return h.make()
	}
	a.fast.hot.Store(h)

	done := make(chan Report)
	go func() {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", ok)
		done <- rep
	}()
	<-entered
	if !l.evict(a, false) {
		t.Fatal("the idle agent was not evicted")
	}
	close(release)
	rep := <-done
	if rep.LoopErr != nil || !rep.Success {
		t.Fatalf("second call: LoopErr %v, Success %v", rep.LoopErr, rep.Success)
	}
	if got := l.Stats("a").Calls; got != 2 {
		t.Errorf("Stats.Calls %d after 2 calls that returned without LoopErr", got)
	}
}

// Sealed counters (an eviction's, fastSeal) refuse a booking, on a cold
// agent's own set as on a hot agent's sets, made before or after the
// seal; what they held is collected once; unsealed (a save that failed),
// they take bookings again.
func TestSealedCountersRefuseBooking(t *testing.T) {
	for _, hot := range []bool{false, true} {
		var f fastCounts
		var own fastHist
		f.until.Store(100)
		if hot {
			f.heat()
		}
		if !f.book(1, 7, &own) {
			t.Fatalf("hot %v: an open path refused a call", hot)
		}
		var calls [len(latencyBounds) + 1]uint64
		var lat int64
		f.collect(&own, &calls, &lat, fastSeal)
		if calls[0] != 1 || lat != 7 {
			t.Fatalf("hot %v: sealing collected %v calls, %d ns; want 1, 7", hot, calls[0], lat)
		}
		if f.book(2, 5, &own) {
			t.Errorf("hot %v: a call booked in sealed counters", hot)
		}
		calls, lat = [len(calls)]uint64{}, 0
		f.collect(&own, &calls, &lat, fastDrain)
		if calls != [len(calls)]uint64{} || lat != 0 {
			t.Errorf("hot %v: sealed counters hold %v calls, %d ns", hot, calls, lat)
		}
		f.unseal(&own)
		if !f.book(3, 5, &own) {
			t.Errorf("hot %v: unsealed counters refused a call", hot)
		}
	}
}
