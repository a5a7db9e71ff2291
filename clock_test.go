package selfimprove

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestCoarseClockReadings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoarseClock(time.Millisecond)
		defer c.close()
		first := c.Now()
		if !first.Equal(time.Now()) {
			t.Fatalf("the first reading %v is not fresh (%v)", first, time.Now())
		}
		time.Sleep(400 * time.Microsecond)
		if got := c.Now(); !got.Equal(first) {
			t.Fatalf("refreshed before the resolution: %v", got.Sub(first))
		}
		for range 100 {
			time.Sleep(700 * time.Microsecond)
			if lag := time.Since(c.Now()); lag < 0 || lag > time.Millisecond {
				t.Fatalf("a reading lags by %v, more than the resolution", lag)
			}
		}
		// Readings carry the monotonic clock: durations are differences of
		// readings, to within the resolution.
		a := c.Now()
		time.Sleep(25 * time.Millisecond)
		if d := c.Now().Sub(a); d < 24*time.Millisecond || d > 26*time.Millisecond {
			t.Fatalf("a 25ms wait measured %v", d)
		}
	})
}

func TestCoarseClockStopsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoarseClock(time.Millisecond)
		c.Now()
		if !c.running.Load() {
			t.Fatal("reading did not start the refresher")
		}
		time.Sleep(idleTicks*time.Millisecond + 5*time.Millisecond)
		synctest.Wait()
		if c.running.Load() {
			t.Fatal("the refresher runs on an idle clock")
		}
		// The next reading is fresh and starts it again.
		if got := c.Now(); !got.Equal(time.Now()) || !c.running.Load() {
			t.Fatalf("after idling: reading %v, now %v, running %v", got, time.Now(), c.running.Load())
		}
		c.close()
		if c.running.Load() {
			t.Fatal("close left the refresher running")
		}
		time.Sleep(time.Second)
		if got := c.Now(); !got.Equal(time.Now()) || c.running.Load() {
			t.Fatal("after close, readings are not fresh, or the refresher restarted")
		}
	})
}

// TestMonoClockFollowsTheWallClock: a call's end time is corrected by the
// wall clock's drift from the monotonic clock, measured at most once every
// wallCheck; its duration stays the monotonic one.
func TestMonoClockFollowsTheWallClock(t *testing.T) {
	m := newMonoClock(time.Now())
	near := func(got int64, want time.Time) bool {
		return time.Duration(got-want.UnixNano()).Abs() < 100*time.Millisecond
	}
	// A drift of an hour, measured just now: applied.
	m.skew.Store(int64(time.Hour))
	m.checked.Store(m.offset())
	end, d := m.since(m.offset())
	if !near(end, time.Now().Add(time.Hour)) || d < 0 || d > time.Second {
		t.Fatalf("end %v, duration %v; want an hour from now", time.Unix(0, end), d)
	}
	// Last measured over wallCheck ago: measured again, and gone.
	m.checked.Store(m.offset() - int64(wallCheck))
	if end, _ := m.since(m.offset()); !near(end, time.Now()) {
		t.Fatalf("end %v after a new measure, want now (%v)", time.Unix(0, end), time.Now())
	}
}
