package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// outcome is what a call did, as the loop decided it.
type outcome struct {
	version                        int
	applied, rolledBack, confirmed bool
	ok                             bool
}

// scenario runs a scripted fault on one agent in a synctest bubble: calls
// of 5ms, a fault that times them out, a tweak, a rollback, a second tweak
// that is confirmed. It returns each call's outcome, the final stats and
// the calls' durations.
func scenario(t *testing.T, opt si.Option) ([]outcome, si.Stats, []time.Duration) {
	var outs []outcome
	var durs []time.Duration
	var stats si.Stats
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
			tries++
			c := a.Config
			c.Route = []string{"mirror", "backup"}[min(tries-1, 1)]
			return &si.Tweak{Config: c, Reason: "try " + c.Route}, nil
		})
		opts := []si.Option{si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithNotifier(nil), si.WithStrategy(strat),
			si.WithDefaultConfig(si.Config{Route: "primary"}), noFloor}
		if opt != nil {
			opts = append(opts, opt)
		}
		l, err := si.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := l.SetThreshold("a", si.Threshold{Failures: 3, Window: time.Minute, Cooldown: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
				time.Sleep(5 * time.Millisecond)
				if i >= 10 && c.Route != "backup" {
					return errors.New("upstream 503")
				}
				return nil
			})
			outs = append(outs, outcome{rep.ConfigVersion, rep.Improvement != nil, rep.Rollback != nil, rep.Confirmed != nil, rep.Success})
			durs = append(durs, rep.Duration)
			time.Sleep(30 * time.Millisecond) // below the coarse clock's idle stop: its readings lag
		}
		stats = l.Stats("a")
	})
	return outs, stats, durs
}

// TestCoarseClockDecidesAlike: with a 1ms coarse clock, the loop makes the
// same decisions on the same calls as with the exact clock, and measures
// each call to within the resolution.
func TestCoarseClockDecidesAlike(t *testing.T) {
	exact, es, ed := scenario(t, nil)
	coarse, cs, cd := scenario(t, si.WithCoarseClock(time.Millisecond))
	var applied, rolled, confirmed int
	for i := range exact {
		if exact[i] != coarse[i] {
			t.Fatalf("call %d: exact clock %+v, coarse clock %+v", i, exact[i], coarse[i])
		}
		if d := cd[i] - ed[i]; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("call %d: duration %v with the coarse clock, %v exact", i, cd[i], ed[i])
		}
		if exact[i].applied {
			applied++
		}
		if exact[i].rolledBack {
			rolled++
		}
		if exact[i].confirmed {
			confirmed++
		}
	}
	if applied != 2 || rolled != 1 || confirmed != 1 {
		t.Fatalf("the scenario did not play out: %d applied, %d rolled back, %d confirmed", applied, rolled, confirmed)
	}
	if es.Calls != cs.Calls || es.Failures != cs.Failures || es.CallsPerDay != cs.CallsPerDay {
		t.Fatalf("stats: exact %+v, coarse %+v", es, cs)
	}
	if d := cs.AvgLatency - es.AvgLatency; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("average latency: exact %v, coarse %v", es.AvgLatency, cs.AvgLatency)
	}
}
