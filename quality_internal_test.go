package selfimprove

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

func TestQualityStateRoundTrip(t *testing.T) {
	st := newState("a", Config{Version: 1, Route: "r"})
	st.bookQuality(1, "r", quality{score: 0.5, scored: true, cost: 2, costed: true}, false)
	st.bookQuality(1, "r", quality{score: 1, scored: true, cost: 3, costed: true}, true)
	enc := roundTrip(t, &st)
	if !strings.Contains(string(enc), `"quality":[{"version":1,"route":"r","scored":2,"score_sum":1.5,"score_squares":1.25,"costed":2,"costed_successes":1,"cost":5}]`) {
		t.Errorf("state file: %s", enc)
	}
	for _, bad := range []string{
		`"score_sum":1.5` + "|" + `"score_sum":2.5`,           // more than one per scored call
		`"score_squares":1.25` + "|" + `"score_squares":1.75`, // more than the sum
		`"costed_successes":1` + "|" + `"costed_successes":3`, // more than the calls with a cost
		`"version":1,"route"` + "|" + `"version":0,"route"`,
		`"cost":5}` + "|" + `"cost":-5}`,
	} {
		from, to, _ := strings.Cut(bad, "|")
		if _, err := decodeState([]byte(strings.Replace(string(enc), from, to, 1)), "a"); err == nil {
			t.Errorf("%s: decoded", to)
		}
	}
}

// TestBookQualityBounded: an agent keeps the records of maxQualityRecs
// versions, never dropping the config in force's.
func TestBookQualityBounded(t *testing.T) {
	st := newState("a", Config{Version: 1})
	for v := 1; v <= 3*maxQualityRecs; v++ {
		st.bookQuality(v, "", quality{score: 1, scored: true}, false)
	}
	if n := len(st.Quality.Recs); n != maxQualityRecs {
		t.Fatalf("%d records, want %d", n, maxQualityRecs)
	}
	if st.qualityOf(1) == nil || st.qualityOf(3*maxQualityRecs) == nil || st.qualityOf(2) != nil {
		t.Errorf("kept %+v", st.Quality.Recs)
	}
}

func FuzzCallID(f *testing.F) {
	f.Add(uint64(0), int64(0), int64(0), uint64(0))
	f.Add(callID(1_700_000_000_000_000_000, 7, 42), int64(1_700_000_000_000_000_000), int64(time.Minute), uint64(42))
	f.Fuzz(func(t *testing.T, id uint64, endN, later int64, key uint64) {
		now := time.Unix(0, endN).Add(time.Duration(later))
		v, age, err := parseCallID(id, key, now)
		if err == nil && (age < 0 || age > ScoreHorizon || v >= 1<<idVersionBits) {
			t.Fatalf("parseCallID(%x) = %d, %v", id, v, age)
		}
		// Every call's own ID parses, within the horizon.
		version := int(uint32(id))
		if later < 0 || later > int64(ScoreHorizon) || endN < 0 || version <= 0 {
			return
		}
		own := callID(endN, version, key)
		v, _, err = parseCallID(own, key, time.Unix(0, endN).Add(time.Duration(later)))
		if err != nil || v != uint64(version)&(1<<idVersionBits-1) {
			t.Fatalf("own ID %x of v%d: %d, %v", own, version, v, err)
		}
		// Past the horizon it is too late, however late: the time field's
		// wrap is no way back in (but for a check that coincides, one in
		// 65,536, for the wrap it would be taken for).
		if late := time.Duration(later)*7 + ScoreHorizon + time.Second; late < 78*time.Hour {
			when := time.Unix(0, endN).Add(late)
			if _, age, err := parseCallID(own, key, when); err == nil {
				units := uint64(endN) >> idTimeShift
				taken := (uint64(when.UnixNano()) - uint64(age)) >> idTimeShift
				if idCheck(own&(1<<idLowBits-1), taken>>idTimeBits, key) != idCheck(own&(1<<idLowBits-1), units>>idTimeBits, key) {
					t.Fatalf("own ID %x accepted %v after its call, as %v old", own, late, age)
				}
			}
		}
		// Another agent's key refuses it, but for one in 65,536.
		if _, _, err := parseCallID(own, key^0x5bd1e995, time.Unix(0, endN).Add(time.Duration(later))); err == nil && own>>idLowBits == callID(endN, version, key^0x5bd1e995)>>idLowBits {
			return
		} else if err == nil {
			t.Fatalf("own ID %x accepted for another key", own)
		}
	})
}

// TestScoredCallAllocs: once the agent has its record, a call that scores
// itself and reports its cost allocates nothing but its share of a block
// of slots (one allocation in slotsPerBlock calls: TestSlotBlocks), and a
// score by ID allocates nothing, counted or a duplicate.
func TestScoredCallAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under the race detector")
	}
	l, _ := quietRAMLoop(t)
	ctx := context.Background()
	if err := l.AddScore(ctx, 1); !errors.Is(err, ErrUnknownCall) {
		t.Fatalf("AddScore outside a call: %v", err)
	}
	fn := func(ctx context.Context, _ Config) error {
		AddCost(ctx, 1)
		return l.AddScore(ctx, 0.75)
	}
	rep, _ := l.ExecuteWithImprovement(ctx, "a", fn)
	if n := testing.AllocsPerRun(100, func() { rep, _ = l.ExecuteWithImprovement(ctx, "a", fn) }); n != 0 {
		t.Errorf("a scored call allocates %v times, want 0 (its slot comes from a block: TestSlotBlocks)", n)
	}
	key := uint64(0)
	if n := testing.AllocsPerRun(100, func() { key++; _, _ = l.ScoreCall("a", rep.ID, 0.75, key) }); n != 0 {
		t.Errorf("a score by ID allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.ScoreCall("a", rep.ID, 0.75, 1) }); n != 0 {
		t.Errorf("a duplicate score allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.Score("a", rep.ID, 0.75) }); n != 0 {
		t.Errorf("Score allocates %v times", n)
	}
	// 102 scored calls, 101 keyed scores (key 1's repeats are
	// duplicates) and 101 scores without a key, each a sample.
	if v, _ := l.View("a"); v.Versions[1].Scored != 304 || v.Versions[1].Costed != 102 { // AllocsPerRun runs once more
		t.Errorf("figures %+v", v.Versions[1])
	}
}

// TestQualityWatchRoundTrip: the watch of the mean score (its run, its
// cooldown, the reference of the change it led to) survives a restart,
// and a watch out of range is refused.
func TestQualityWatchRoundTrip(t *testing.T) {
	st := newState("a", Config{Version: 2, Route: "r"})
	st.MaxVersion = 2
	st.bookQuality(2, "r", quality{score: 0.5, scored: true}, false)
	st.Quality.Watch = qualityWatch{Version: 2, N: 2, Sum: 1, Squares: 0.5, Mean: 0.7, Bet: 0.5, LogW: 1.25, Until: 4e18,
		Ref: qualityRec{Version: 2, Scored: 3, Sum: 1.5, Squares: 1}}
	enc := roundTrip(t, &st)
	if !strings.Contains(string(enc), `"quality_watch":{"version":2,"scored":2,"score_sum":1,"score_squares":0.5,"mean":0.7,"bet":0.5,"log_wealth":1.25,"cooldown_until_ns":4000000000000000000,"change_reference":{"version":2,"scored":3,"score_sum":1.5,"score_squares":1}}`) {
		t.Errorf("state file: %s", enc)
	}
	// A watch saved before the bet (no bet, no log-wealth) loads, and
	// its run starts afresh.
	old := strings.Replace(string(enc), `"bet":0.5,"log_wealth":1.25,`, "", 1)
	back, err := decodeState([]byte(old), "a")
	if err != nil {
		t.Fatalf("a watch saved before the bet: %v", err)
	}
	if w := back.Quality.Watch; w.N != 0 || w.Sum != 0 || w.Squares != 0 || w.LogW != 0 || w.Mean != 0.7 || w.Until != 4e18 || w.Ref.Scored != 3 {
		t.Errorf("a watch saved before the bet decoded as %+v", w)
	}
	// The reference of a fall whose proposal waits for approval.
	pending := st
	pending.Quality = &qualityBook{Recs: st.Quality.Recs, Watch: qualityWatch{Ref: qualityRec{Scored: 3, Sum: 1.5, Squares: 1}, RefFor: "p-1"}}
	if enc := roundTrip(t, &pending); !strings.Contains(string(enc), `"change_reference":{"version":0,"scored":3,"score_sum":1.5,"score_squares":1},"change_reference_proposal":"p-1"`) {
		t.Errorf("state file with a reference waiting for its approval: %s", enc)
	}
	for _, bad := range []string{
		`"mean":0.7` + "|" + `"mean":1.7`,
		`"bet":0.5` + "|" + `"bet":1`,
		`"log_wealth":1.25` + "|" + `"log_wealth":-1`,
		`"log_wealth":1.25` + "|" + `"log_wealth":7`,
		`"score_sum":1,` + "|" + `"score_sum":3,`,
		`"change_reference":{"version":2` + "|" + `"change_reference":{"version":9`,
		`"cooldown_until_ns":4000000000000000000` + "|" + `"cooldown_until_ns":-1`,
		`"cooldown_until_ns"` + "|" + `"change_reference_proposal":"` + strings.Repeat("x", maxRefFor+1) + `","cooldown_until_ns"`,
	} {
		from, to, _ := strings.Cut(bad, "|")
		if _, err := decodeState([]byte(strings.Replace(string(enc), from, to, 1)), "a"); err == nil {
			t.Errorf("%s: decoded", to)
		}
	}
}

// quietRAMLoop returns a Loop in memory on a fake clock, with no strategy,
// notifier or log, closed when t ends, and its clock.
func quietRAMLoop(t *testing.T) (*Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clk
}
