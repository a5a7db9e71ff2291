package selfimprove_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Issue 26, item 6: in a fleet, dead routes, probe schedules and
// account-wide causes are shared, so that one replica's discovery holds
// for all.

// routeFleet is n replicas with the ladder primary → backup → spare and
// two attempts a call.
func routeFleet(t *testing.T, n int) *fleetEnv {
	return newFleetEnv(t, n, nil, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}),
		si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
}

// callRoutes makes one call of id on replica r, answered by up for the
// route each attempt runs on.
func (e *fleetEnv) callRoutes(r int, id string, up func(route string) error) si.Report {
	rep, _ := e.reps[r].ExecuteWithImprovement(context.Background(), id, func(_ context.Context, cfg si.Config) error {
		e.clk.Advance(10 * time.Millisecond)
		return up(cfg.Route)
	})
	return rep
}

// countEvents counts the events of type typ on every replica.
func (e *fleetEnv) countEvents(typ si.EventType) (n int) {
	for _, l := range e.reps {
		n += len(l.Events(si.EventFilter{Types: []si.EventType{typ}}))
	}
	return n
}

// A route one replica finds dead is skipped by another replica's
// fallback, for another agent. Before the fleet's notes, replica 1 sent
// the withdrawn backup a request of its own.
func TestFleetSharesDeadRoutes(t *testing.T) {
	e := routeFleet(t, 2)
	sent := map[string]int{}
	up := func(route string) error {
		sent[route]++
		switch route {
		case "", "primary":
			return err503
		case "backup":
			return errors.New("404 model_not_found: the model `backup` does not exist")
		}
		return nil
	}
	e.callRoutes(0, "a", up) // primary 503, then backup: dead
	e.clk.Advance(2 * time.Second)
	e.sync()
	if ds := e.reps[1].DeadRoutes(); len(ds) != 1 || ds[0].Route != "backup" || ds[0].Until.Sub(e.clk.Now()) < 23*time.Hour {
		t.Fatalf("replica 1's dead routes: %+v", ds)
	}
	clear(sent)
	if rep := e.callRoutes(1, "b", up); !rep.Success || sent["backup"] != 0 || sent["spare"] != 1 {
		t.Fatalf("replica 1's call: success %v, requests %v; want the spare, not the dead backup", rep.Success, sent)
	}
}

// Agents held for one account-wide cause on three replicas raise one
// alert and one proposal for the fleet, and one end. Before, each replica
// raised its own.
func TestFleetOneAlertPerCause(t *testing.T) {
	e := routeFleet(t, 3)
	quota := true
	up := func(string) error {
		if quota {
			return errQuota
		}
		return nil
	}
	for r, id := range []string{"a", "b", "c"} {
		e.callRoutes(r, id, up)
		e.callRoutes(r, id, up)
		e.sync()
	}
	if n := e.countEvents(si.EventAccountCause); n != 1 {
		t.Fatalf("%d account-wide alerts over the fleet, want 1", n)
	}
	props := map[string]bool{}
	for _, l := range e.reps {
		for _, p := range l.Proposals(nil) {
			props[p.ID] = true
		}
	}
	if len(props) != 1 {
		t.Fatalf("%d proposals over the fleet, want 1: %v", len(props), props)
	}
	quota = false
	e.clk.Advance(2 * time.Minute)
	for r, id := range []string{"a", "b", "c"} {
		if rep := e.callRoutes(r, id, up); !rep.Success {
			t.Fatalf("agent %s on replica %d not released: %v", id, r, rep.Err)
		}
		e.sync()
	}
	if n := e.countEvents(si.EventAccountRecovered); n != 1 {
		t.Fatalf("%d ends of the cause over the fleet, want 1", n)
	}
}

// The end of an account-wide cause the fleet knew is told by the flush
// that learns it, at that flush's time, not at the call that ended the
// hold: the event says when the fleet's replicas were told.
func TestFleetCauseEndAtFlush(t *testing.T) {
	e := routeFleet(t, 1)
	si.TestingManualFlush(e.reps[0])
	quota := true
	up := func(string) error {
		if quota {
			return errQuota
		}
		return nil
	}
	e.callRoutes(0, "a", up)
	e.callRoutes(0, "a", up)
	e.sync()
	if n := e.countEvents(si.EventAccountCause); n != 1 {
		t.Fatalf("%d account-wide alerts, want 1", n)
	}
	quota = false
	e.clk.Advance(2 * time.Minute)
	if rep := e.callRoutes(0, "a", up); !rep.Success {
		t.Fatalf("agent not released: %v", rep.Err)
	}
	e.clk.Advance(30 * time.Second)
	flushed := e.clk.Now()
	e.sync()
	evs := e.reps[0].Events(si.EventFilter{Types: []si.EventType{si.EventAccountRecovered}})
	if len(evs) != 1 || !evs[0].Time.Equal(flushed.UTC()) {
		t.Fatalf("the end of the cause: %+v; want one, at the flush (%v)", evs, flushed.UTC())
	}
}

// While one replica's probe of a held agent is in flight, the other
// replicas' calls of the agent fail at once: one request per interval for
// the fleet. Before the claim, each replica sent a probe of its own.
func TestFleetOneProbePerInterval(t *testing.T) {
	e := routeFleet(t, 3)
	sent := 0
	var nested []error
	up := func(string) error {
		sent++
		if sent == 3 { // the first probe: the other replicas call meanwhile
			for r := 1; r < 3; r++ {
				_, err := e.reps[r].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
					sent++
					return errQuota
				})
				nested = append(nested, err)
			}
		}
		return errQuota
	}
	e.callRoutes(0, "a", up)
	e.callRoutes(0, "a", up) // held
	if _, err := e.reps[1].ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Fatalf("replica 1 does not hold the agent: %v", err)
	}
	e.clk.Advance(time.Minute)
	e.callRoutes(0, "a", up)
	if sent != 3 {
		t.Fatalf("%d requests: the other replicas probed during replica 0's probe (%v)", sent, nested)
	}
	for _, err := range nested {
		if !errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("a call during the probe: %v, want it held", err)
		}
	}
	for range 30 * 6 { // 30 minutes, a call every 10 s, round robin
		e.clk.Advance(10 * time.Second)
		e.callRoutes(int(e.clk.Now().Unix()/10)%3, "a", up)
	}
	if sent > 3+5 { // probes at 3, 7, 15, 23 and 31 minutes
		t.Fatalf("%d requests in 30 minutes of holding, want at most 8", sent)
	}
}

// Issue 40, item 3, in a fleet: a primary that recovered only half way
// (after a 60 s outage it fails half its requests at random; a request
// every 4 s, each on the next of 3 replicas, for an hour) is not brought
// back on every lucky probe of any replica: the returns rolled back and
// the good probes in a row are part of the agent's shared state. Over 30
// seeded hours: before, 6.9 returns an hour; now 3.3. Under -race, the
// first 8 hours (74 s of a 2-core machine's time for 30; CI runs the 30
// without -race).
func TestFleetHalfRecoveredPrimaryFewReturns(t *testing.T) {
	seeds := 30
	if si.TestingRace {
		seeds = 8
	}
	returns := 0
	for seed := range uint64(seeds) {
		e := newFleetEnv(t, 3, nil, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}),
			si.WithRetryPolicy(si.RetryPolicy{JitterSeed: 7}))
		coin := rand.New(rand.NewPCG(seed, 2))
		for i := range 15 * 61 {
			at := t0.Add(time.Duration(i) * 4 * time.Second)
			e.clk.Advance(at.Sub(e.clk.Now()))
			rep, _ := e.reps[i%3].ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
				if cfg.Route == "backup" {
					return nil
				}
				if e.clk.Now().Sub(t0) < time.Minute || coin.IntN(2) == 0 {
					return err503
				}
				return nil
			})
			if !rep.Success {
				t.Fatalf("seed %d: request %d failed: %v", seed, i, rep.Err)
			}
			e.sync()
		}
		for _, ch := range e.reps[0].Changes("a") {
			if ch.From.Route == "backup" && ch.To.Route != "backup" {
				returns++
			}
		}
	}
	mean := float64(returns) / float64(seeds)
	if mean > 4 {
		t.Errorf("%.1f returns an hour to the half-recovered primary over the fleet: want at most 4", mean)
	}
	t.Logf("%d seeded hours, 3 replicas: %.1f returns an hour to the half-recovered primary", seeds, mean)
}

// A circuit breaker's probe is not claimed in a fleet: the probe's claim
// (fleetLink.claimProbe) lets it run, where a held agent's probe is one
// replica's at a time. Undone (a breaker's probe claimed like a held
// agent's, for which none is due), the probe fails at once with
// ErrCircuitOpen and the circuit never closes.
func TestFleetBreakerProbeNotClaimed(t *testing.T) {
	e := newFleetEnv(t, 2, nil, si.WithCircuitBreaker(si.CircuitBreaker{Failures: 1, CoolOff: time.Minute, CoolOffCalls: -1}))
	ctx := context.Background()
	if _, err := e.reps[0].ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	for r := range 2 {
		if _, err := e.reps[r].ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
			t.Fatalf("replica %d: the circuit is not open: %v", r, err)
		}
	}
	e.clk.Advance(time.Minute)
	ran := false
	if _, err := e.reps[1].ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("replica 1's probe after the cool-off: ran %v, %v", ran, err)
	}
	for r := range 2 {
		if _, err := e.reps[r].ExecuteWithImprovement(ctx, "a", func(context.Context, si.Config) error { return nil }); err != nil {
			t.Fatalf("replica %d after the probe: %v", r, err)
		}
	}
}
