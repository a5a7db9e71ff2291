package selfimprove

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/self-improving-loop/selfimprove/failure"
)

// TestWindowMatchesModel checks the bucket ring against a brute-force model
// on random sequences of calls, gaps and resizes.
func TestWindowMatchesModel(t *testing.T) {
	type ev struct {
		t      int64
		failed bool
		lat    int64
	}
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		width := slotWidth(time.Duration(1+r.IntN(100)) * time.Minute)
		w := window{Width: width}
		var evs []ev
		var floor int64 // events before it fell out of a narrower window
		now := int64(1_700_000_000) * int64(time.Second)
		for step := range 400 {
			switch k := r.IntN(20); {
			case k < 14: // a call
				e := ev{now, r.IntN(3) == 0, int64(r.IntN(1000))}
				evs = append(evs, e)
				s := w.at(e.t)
				s.Calls++
				s.Latency += e.lat
				if e.failed {
					s.Failures++
				}
			case k < 19: // time passes
				now += int64(r.IntN(int(3 * width)))
			default: // the window changes
				if step%2 == 0 {
					// Only grow to a multiple, so no bucket is split and the
					// model stays exact.
					w.advance(now / w.Width)
					floor = max(floor, (w.Head-windowSlots+1)*w.Width)
					w.resize(w.Width * int64(1+r.IntN(3)))
				}
			}
			calls, fails, lat := w.sum(now)
			var mc, mf int
			var ml time.Duration
			head := now / w.Width
			for _, e := range evs {
				if idx := e.t / w.Width; e.t >= floor && idx > head-windowSlots && idx <= head {
					mc++
					ml += time.Duration(e.lat)
					if e.failed {
						mf++
					}
				}
			}
			if calls != mc || fails != mf || lat != ml {
				t.Fatalf("run %d step %d: window (%d,%d,%v), model (%d,%d,%v)", run, step, calls, fails, lat, mc, mf, ml)
			}
		}
	}
}

func TestWindowClockStepsBack(t *testing.T) {
	w := window{Width: int64(time.Minute)}
	now := int64(1_700_000_000) * int64(time.Second)
	w.at(now).Calls++
	w.at(now-int64(24*time.Hour)).Calls++ // far in the past: counted in the newest bucket
	w.at(now-int64(time.Minute)).Calls++  // within the window: its own bucket
	if c, _, _ := w.sum(now); c != 3 {
		t.Fatalf("calls = %d, want 3", c)
	}
	w.at(-5).Calls++ // before 1970: no panic
}

func TestDayCounter(t *testing.T) {
	var d dayCounter
	now := int64(1_700_000_000) * int64(time.Second)
	for i := range 96 {
		d.add(now + int64(i)*int64(daySlot))
	}
	end := now + 95*int64(daySlot)
	if n := d.sum(end); n != 96 {
		t.Fatalf("sum = %d, want 96", n)
	}
	if n := d.sum(end + int64(daySlot)); n != 95 {
		t.Fatalf("a slot later: sum = %d, want 95", n)
	}
	if n := d.sum(end + 1000*int64(daySlot)); n != 0 {
		t.Fatalf("much later: sum = %d, want 0", n)
	}
}

func TestFailuresOf(t *testing.T) {
	var tr tracker
	tr.Win.Width = int64(time.Minute)
	for i := range 100 {
		tr.record(uint64(i/50), int64(i+1), 0, true, 1, "x", 0)
	}
	// The ring keeps the last 64: 14 of gen 0, 50 of gen 1.
	if n := tr.failuresOf(1, 0); n != 50 {
		t.Errorf("gen 1: %d, want 50", n)
	}
	if n := tr.failuresOf(0, 0); n != 14 {
		t.Errorf("gen 0: %d, want 14", n)
	}
	if n := tr.failuresOf(1, 90); n != 10 {
		t.Errorf("gen 1 after 90: %d, want 10", n)
	}
	if got := tr.recentFailures(0, func(uint32) (failure.Class, string) { return "", "" }); len(got) != recentRing || got[0].Time.UnixNano() != 85 || got[15].Time.UnixNano() != 100 {
		t.Errorf("recent = %v", got)
	}
}

type panicErr struct{}

func (panicErr) Error() string { panic("bad Error method") }

func TestErrText(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("short"), "short"},
		{errors.New(long), strings.Repeat("é", failure.MaxText/2)},
		{errors.New("a" + long), "a" + strings.Repeat("é", (failure.MaxText-1)/2)},
		{panicErr{}, "selfimprove: Error method panicked"},
	}
	for _, tt := range tests {
		got := failure.Text(tt.err)
		if got != tt.want || len(got) > failure.MaxText || !utf8.ValidString(got) {
			t.Errorf("failure.Text(%.20q...) = %.20q... (%d bytes)", tt.want, got, len(got))
		}
	}
}

// TestAgentSizeClass keeps an agent within the 3456-byte allocation size
// class. The runtime adds an 8-byte header to objects over 512 bytes that
// hold pointers, and the next class is 4096 bytes: a field that crosses
// the line costs every agent 640 bytes more. (The recent regime's 16 calls
// moved it up from the 3072-byte class.)
func TestAgentSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(agent{}) + 8; n > 3456 {
		t.Errorf("an agent takes %d bytes with its header, more than its 3456-byte size class", n)
	}
}

func TestRegime(t *testing.T) {
	var tr tracker
	tr.Win.Width = int64(time.Second)
	ms := time.Millisecond
	// 20 calls at t = 1..20 s, 1ms each longer than the last; the calls at
	// 12, 15 and 18 s failed.
	for i := int64(1); i <= 20; i++ {
		failed := i == 12 || i == 15 || i == 18
		tr.record(1, i*int64(time.Second), time.Duration(i)*ms, failed, 1, "", 0)
	}
	sec := int64(time.Second)
	tests := []struct {
		name  string
		since int64
		n     int
		want  Stats
	}{
		{"last 10", 0, 10, okLat(newStats(10, 3, (11+12+13+14+15+16+17+18+19+20)*ms), (11+13+14+16+17+19+20)*ms)},
		{"since the fault began at 12s", tr.faultStart(10 * sec), 16, okLat(newStats(9, 3, (12+13+14+15+16+17+18+19+20)*ms), (13+14+16+17+19+20)*ms)},
		{"capped at the ring", 0, 100, okLat(newStats(16, 3, (5+6+7+8+9+10+11+12+13+14+15+16+17+18+19+20)*ms), (5+6+7+8+9+10+11+13+14+16+17+19+20)*ms)},
		{"fault began at 15s", tr.faultStart(13 * sec), 16, okLat(newStats(6, 2, (15+16+17+18+19+20)*ms), (16+17+19+20)*ms)},
		{"no calls since", 21 * sec, 16, newStats(0, 0, 0)},
	}
	for _, tt := range tests {
		if got := tr.regime(tt.since, tt.n); got != tt.want {
			t.Errorf("%s: regime = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if got := tr.faultStart(20 * sec); got != 0 {
		t.Errorf("faultStart with no failure in the window = %d, want 0", got)
	}
}

// okLat sets s's successful calls' latency.
func okLat(s Stats, d time.Duration) Stats {
	s.SuccessLatency = d
	return s
}
