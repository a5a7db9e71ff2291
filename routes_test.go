package selfimprove_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// routeLoop is a loop on a fake clock with the ladder primary → backup →
// spare.
func routeLoop(t *testing.T, clk *fakeclock.Clock, opts ...si.Option) *si.Loop {
	t.Helper()
	base := []si.Option{si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithFlushInterval(0), si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup", "spare"}}), noFloor}
	l, err := si.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// callEvery makes n calls of agent, one every gap, each answered by up
// for the route it runs on; it returns how many succeeded.
func callEvery(l *si.Loop, clk *fakeclock.Clock, agent string, n int, gap time.Duration, up func(route string) error) (ok int) {
	for range n {
		rep, _ := l.ExecuteWithImprovement(context.Background(), agent, func(_ context.Context, cfg si.Config) error {
			clk.Advance(100 * time.Millisecond)
			return up(cfg.Route)
		})
		if rep.Success {
			ok++
		}
		clk.Advance(gap)
	}
	return ok
}

var errGone = errors.New("404 model_not_found: the model `primary` does not exist")

// Issue 26: a rollback whose target is a dead model rolls forward to the
// next live route, and the dead model gets no more requests. Before, the
// move was rolled back to the withdrawn model, which then took every
// call for days.
func TestRollbackNeverInstallsADeadRoute(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk)
	start := clk.Now()
	dead := 0
	up := func(route string) error {
		switch {
		case route == "" || route == "primary":
			dead++
			return errGone
		case route == "backup" && clk.Now().Before(start.Add(5*time.Minute)):
			return err503
		case route == "backup" && clk.Now().Before(start.Add(10*time.Minute)):
			return nil
		case route == "backup":
			return err503 // the backup fails for good after 10 minutes
		}
		return nil
	}
	callEvery(l, clk, "a", 60, time.Minute, up)
	if ds := l.DeadRoutes(); len(ds) != 1 || ds[0].Route != "primary" || ds[0].Reason == "" {
		t.Errorf("dead routes %+v", ds)
	}
	if v, _ := l.View("a"); len(v.DeadRoutes) != 1 || v.Next == "" {
		t.Errorf("view: dead routes %+v, next %+v", v.DeadRoutes, v.Next)
	}
	callEvery(l, clk, "a", 3*24*60-60, time.Minute, up)
	if dead > 20 {
		t.Errorf("%d calls to the dead route", dead)
	}
	for _, ch := range l.Changes("a") {
		if ch.To.Route == "" || ch.To.Route == "primary" {
			t.Errorf("change %d → %d installed the dead route: %s (%s)", ch.From.Version, ch.To.Version, ch.Reason, ch.State)
		}
	}
	if got := l.Config("a").Route; got != "spare" {
		t.Errorf("ends on route %q, want spare", got)
	}
}

// With no live route left, a failing move is kept and a person is asked.
func TestRollbackIntoDeadRouteKeepsAndProposes(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	start := clk.Now()
	up := func(route string) error {
		switch {
		case route == "" || route == "primary":
			return errGone
		case clk.Now().Before(start.Add(5 * time.Minute)):
			return err503
		}
		return nil
	}
	ok := callEvery(l, clk, "a", 24*60, time.Minute, up)
	if got := l.Config("a").Route; got != "backup" {
		t.Errorf("route %q, want backup", got)
	}
	if ok < 24*60-30 {
		t.Errorf("%d of %d calls succeeded", ok, 24*60)
	}
	kept := false
	for _, ch := range l.Changes("a") {
		kept = kept || ch.State == si.ChangeConfirmed && ch.To.Route == "backup"
	}
	if !kept {
		t.Errorf("changes %+v: want the move to backup kept", l.Changes("a"))
	}
}

// Issue 26: an agent whose every call fails is not taken as healthy. Before,
// once 90 calls in the window had failed, the "healthy agents stay
// quiet" rule took 100 % failure as the agent's normal and nothing
// followed.
func TestEveryCallFailingIsNeverNormal(t *testing.T) {
	clk := fakeclock.New(t0)
	runs := 0
	quietStrategy := si.StrategyFunc(func(context.Context, si.Analysis) (*si.Tweak, error) { runs++; return nil, nil })
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{}), si.WithStrategy(quietStrategy))
	// 13 hours of a call a minute, every one failing: a run after the
	// cold start, 6 hours of cooldown (medium frequency), then a run
	// every 3 hours (high frequency).
	callEvery(l, clk, "a", 13*60, time.Minute, func(string) error { return err503 })
	if runs < 4 {
		t.Errorf("%d strategy runs in 13 hours of failing calls, want 4 (one per cooldown)", runs)
	}
}

// Issue 26: after a rollback the strategy looks again within minutes,
// not after the profile's cooldown (3 hours at the high frequency); with
// its candidates used up, it files a proposal naming what was tried and
// how it ended. Before, the agent sat out the whole cooldown.
func TestNextStepSoonAfterRollback(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{}))
	n := 0
	for range 6 * 60 * 2 { // two hours, a call every 10 s: high frequency
		l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			clk.Advance(50 * time.Millisecond)
			n++
			if cfg.MaxAttempts > 1 || n%3 == 0 {
				return err503 // retries overload the upstream: one more attempt makes it worse
			}
			return nil
		})
		clk.Advance(10 * time.Second)
	}
	var rolled *si.Change
	for _, ch := range l.Changes("a") {
		if ch.State == si.ChangeRolledBack {
			c := ch
			rolled = &c
			break
		}
	}
	if rolled == nil {
		t.Fatalf("no rollback: %+v", l.Changes("a"))
	}
	ps := l.Proposals(nil)
	if len(ps) == 0 || ps[0].Created.Sub(rolled.DecidedAt) > 15*time.Minute || !strings.Contains(ps[0].Rationale, "tried: ") {
		t.Fatalf("after the rollback at %v, proposals %+v: want one within 15 minutes naming what was tried", rolled.DecidedAt, ps)
	}
	t.Logf("rollback at %v; proposal %v later: %s", rolled.DecidedAt.Format("15:04"), ps[0].Created.Sub(rolled.DecidedAt), ps[0].Rationale)
}

var errQuota = errors.New("429 insufficient_quota: You exceeded your current quota, please check your plan and billing details")

// Quota holds an agent: calls fail at once (ErrCircuitOpen, class quota), one probe
// per interval gets through, and a good probe releases it.
func TestQuotaHoldsAndReleases(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk)
	sent, quota := 0, true
	fn := quotaFn(&sent, &quota)
	for range 2 {
		l.ExecuteWithImprovement(context.Background(), "a", fn)
	}
	_, err := l.ExecuteWithImprovement(context.Background(), "a", fn)
	if !errors.Is(err, si.ErrCircuitOpen) || failure.Classify(err) != failure.ClassQuota || !strings.Contains(err.Error(), "held for quota") {
		t.Fatalf("held call: %v", err)
	}
	if sent != 2 {
		t.Fatalf("%d requests sent, want 2", sent)
	}
	for range 30 { // 30 calls over 5 minutes: probes at 1 and 3 minutes
		l.ExecuteWithImprovement(context.Background(), "a", fn)
		clk.Advance(10 * time.Second)
	}
	if sent != 4 {
		t.Errorf("%d requests in 5 minutes of holding, want 2 probes", sent)
	}
	quota = false
	clk.Advance(5 * time.Minute)
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", fn); err != nil {
		t.Fatalf("probe after the quota came back: %v", err)
	}
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", fn); err != nil {
		t.Fatalf("after release: %v", err)
	}
	evs := l.Events(si.EventFilter{Types: []si.EventType{si.EventAccountCause, si.EventAccountRecovered}})
	if len(evs) != 2 {
		t.Errorf("events %+v: want the cause and its end", evs)
	}
}

// ProbePolicy.NoHold opts a class out: each call runs, and fails.
func TestNoHoldOptsOut(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithProbes(si.ProbePolicy{NoHold: []failure.Class{failure.ClassQuota}}))
	sent := 0
	for range 10 {
		l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { sent++; return errQuota })
	}
	if sent != 10 {
		t.Errorf("%d of 10 calls ran", sent)
	}
}

// The route state (away from the primary, dead routes, a hold) survives a
// restart.
func TestRouteStateSurvivesRestart(t *testing.T) {
	clk := fakeclock.New(t0)
	dir := t.TempDir()
	opts := []si.Option{si.WithDir(dir), si.WithStore(nil)}
	l := routeLoop(t, clk, opts...)
	callEvery(l, clk, "a", 10, time.Minute, func(route string) error {
		if route == "" || route == "primary" {
			return errGone
		}
		return nil
	})
	callEvery(l, clk, "q", 3, time.Second, func(string) error { return errQuota })
	before, _ := l.View("q")
	l.Close()
	l2 := routeLoop(t, clk, opts...)
	if got := l2.Config("a").Route; got != "backup" {
		t.Errorf("after restart: route %q", got)
	}
	if _, err := l2.ExecuteWithImprovement(context.Background(), "q", func(context.Context, si.Config) error { return nil }); !errors.Is(err, si.ErrCircuitOpen) {
		t.Errorf("after restart the hold is gone: %v (view before: %s)", err, before.Next)
	}
}

// A fallback that answers "no such model" marks the fallback dead, not
// the route the call began on. Before, the primary was marked dead for a
// day for the backup's 404.
func TestFallbackFailureMarksItsOwnRoute(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	callEvery(l, clk, "a", 1, time.Second, func(route string) error {
		if route == "backup" {
			return errors.New("404 model_not_found: the model `backup` does not exist")
		}
		return err503
	})
	if ds := l.DeadRoutes(); len(ds) != 1 || ds[0].Route != "backup" {
		t.Fatalf("dead routes %+v, want the backup alone", ds)
	}
}

// TestNextCandidateSoonAfterRollback: issue 26's stuck agent, with a
// candidate left: after its first tweak (one more attempt, which makes
// an overloaded upstream worse) is rolled back, the next candidate is
// applied within 15 minutes at the high-frequency profile, not after
// the 3-hour profile cooldown, and it fixes the agent.
func TestNextCandidateSoonAfterRollback(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithRoutes(si.Routes{}), si.WithCandidates(si.Candidate{Name: "gentle", Params: map[string]string{"prompt": "v2"}}))
	n := 0
	for range 6 * 60 * 2 { // two hours, a call every 10 s
		l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			clk.Advance(50 * time.Millisecond)
			n++
			if cfg.Params["prompt"] != "v2" && (cfg.MaxAttempts > 1 || n%3 == 0) {
				return err503
			}
			return nil
		})
		clk.Advance(10 * time.Second)
	}
	chs := l.Changes("a")
	if len(chs) != 2 || chs[0].State != si.ChangeRolledBack || chs[1].To.Params["prompt"] != "v2" || chs[1].State != si.ChangeConfirmed {
		t.Fatalf("changes %+v: want a rollback, then the candidate confirmed", chs)
	}
	if d := chs[1].AppliedAt.Sub(chs[0].DecidedAt); d > 15*time.Minute {
		t.Fatalf("the candidate came %v after the rollback, want within 15 minutes", d)
	} else {
		t.Logf("rollback at %s; the candidate %v later: %s", chs[0].DecidedAt.Format("15:04:05"), d, chs[1].Reason)
	}
}

// quotaFn returns a call that counts the requests it sends in *sent, and
// fails with errQuota while *quota is set.
func quotaFn(sent *int, quota *bool) func(context.Context, si.Config) error {
	return func(context.Context, si.Config) error {
		*sent++
		if *quota {
			return errQuota
		}
		return nil
	}
}
