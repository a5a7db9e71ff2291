package selfimprove_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// opLoop is a Loop on clk without a strategy, on st, or on a state
// directory of its own when st is nil.
func opLoop(t *testing.T, clk *fakeclock.Clock, st si.Store, opts ...si.Option) *si.Loop {
	t.Helper()
	all := append([]si.Option{si.WithClock(clk), si.WithStrategy(nil), si.WithLogger(quiet), si.WithNotifier()}, opts...)
	if st != nil {
		all = append(all, si.WithStore(st))
	} else {
		all = append(all, si.WithDir(t.TempDir()))
	}
	l, err := si.New(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var errWidget = errors.New("500 internal server error: widget exploded")

// opRun makes n calls of agent "a", a minute apart; a config on route
// "bad" fails, any other succeeds. It returns the first rollback.
func opRun(l *si.Loop, clk *fakeclock.Clock, n int) *si.Change {
	for range n {
		clk.Advance(time.Minute)
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			if c.Route == "bad" {
				return errWidget
			}
			return nil
		})
		if rep.Rollback != nil {
			return rep.Rollback
		}
	}
	return nil
}

// A Rewind that is refused changes nothing: the change under
// verification goes on being verified. Before, it was superseded by a
// rewind that never happened, and stayed in force unverified.
func TestRefusedRewindLeavesTheVerification(t *testing.T) {
	clk := fakeclock.New(t0)
	l := opLoop(t, clk, nil)
	opRun(l, clk, 3)
	if err := l.SetConfig("a", si.Config{Route: "b"}); err != nil { // v2
		t.Fatal(err)
	}
	ch, err := l.Try("a", si.Config{}, "back to plain") // v3: v1's content
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Rewind("a", 1, "v1 please"); !errors.Is(err, si.ErrTweakRejected) {
		t.Fatalf("Rewind to a version with the current config's content: %v, want ErrTweakRejected", err)
	}
	chs := l.Changes("a")
	if last := chs[len(chs)-1]; last.ID != ch.ID || last.State != si.ChangeVerifying {
		t.Errorf("after a refused Rewind, the tried change v%d is %s (%q); want it still verifying", last.To.Version, last.State, last.Verdict)
	}
}

// failingStore fails every save while fail is set.
type failingStore struct {
	*si.RAMStore
	fail atomic.Bool
}

func (s *failingStore) SaveAgent(id string, b []byte) error {
	if s.fail.Load() {
		return errors.New("disk full")
	}
	return s.RAMStore.SaveAgent(id, b)
}

// A Try, Rewind or SetConfig whose change cannot be saved is not made:
// the config before it stays in force, and the next Try works once the
// disk is back. Before, each returned an error with its change in force.
func TestUnsavedTryAndRewindAreTakenBack(t *testing.T) {
	clk := fakeclock.New(t0)
	st := &failingStore{RAMStore: si.NewRAMStore()}
	l := opLoop(t, clk, st)
	opRun(l, clk, 20)
	if err := l.SetConfig("a", si.Config{Route: "x"}); err != nil { // v2, saved
		t.Fatal(err)
	}
	st.fail.Store(true)
	if _, err := l.Try("a", si.Config{Route: "y"}, "r"); err == nil {
		t.Fatal("Try saved with the disk failing")
	}
	if c := l.Config("a"); c.Version != 2 || c.Route != "x" {
		t.Errorf("Try failed (its change not saved), yet config v%d (route %q) is in force; want v2", c.Version, c.Route)
	}
	if _, err := l.Rewind("a", 1, "r"); err == nil {
		t.Fatal("Rewind saved with the disk failing")
	}
	if c := l.Config("a"); c.Version != 2 || c.Route != "x" {
		t.Errorf("Rewind failed (its change not saved), yet config v%d (route %q) is in force; want v2", c.Version, c.Route)
	}
	if err := l.SetConfig("a", si.Config{Route: "w"}); err == nil {
		t.Fatal("SetConfig saved with the disk failing")
	}
	if c := l.Config("a"); c.Version != 2 || c.Route != "x" {
		t.Errorf("SetConfig failed (not saved), yet config v%d (route %q) is in force; want v2", c.Version, c.Route)
	}
	st.fail.Store(false)
	if _, err := l.Try("a", si.Config{Route: "z"}, "the disk is back"); err != nil {
		t.Errorf("Try once the disk is back: %v", err)
	}
}

// Under propose-only, Try files the config; Approve applies it, verified,
// also a config rolled back before, as Try itself would. Before, Approve
// refused it as a repeat of the rolled-back tweak.
func TestApproveATriedConfigRolledBackBefore(t *testing.T) {
	clk := fakeclock.New(t0)
	l := opLoop(t, clk, nil)
	opRun(l, clk, 20)
	if _, err := l.Try("a", si.Config{Route: "bad"}, "first try"); err != nil {
		t.Fatal(err)
	}
	if opRun(l, clk, 60) == nil {
		t.Fatal("not rolled back")
	}
	if err := l.SetProposeOnly("a", true); err != nil {
		t.Fatal(err)
	}
	ch, err := l.Try("a", si.Config{Route: "bad"}, "the upstream is fixed now, try again")
	if !errors.Is(err, si.ErrFiledForApproval) || ch.ProposalID == "" {
		t.Fatalf("Try under propose-only: %+v, %v", ch, err)
	}
	if err := l.Approve(ch.ProposalID); err != nil {
		t.Errorf("Approve of the config the operator tried: %v", err)
	}
	if c := l.Config("a"); c.Route != "bad" {
		t.Errorf("config after the approval: %+v", c)
	}
}

// An operator's Try that keeps the route, made while the agent is away on
// its fallback, leaves it away: once the try is rolled back and the
// primary is back, the agent returns to it. Before, the Try ended the
// stay away, and the agent stayed on the fallback for good.
func TestTryWhileAwayStillReturns(t *testing.T) {
	clk := fakeclock.New(t0)
	l := opLoop(t, clk, nil, si.WithRoutes(si.Routes{Primary: "primary", Fallbacks: []string{"backup"}}))
	primaryUp := true
	call := func() si.Report {
		clk.Advance(4 * time.Second)
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			if c.Timeout == 42*time.Second {
				return errWidget // the operator's tried config is broken
			}
			if c.Route == "backup" || primaryUp {
				return nil
			}
			return errors.New("503 Service Unavailable: the engine is currently overloaded, please try again later")
		})
		return rep
	}
	for range 20 {
		call()
	}
	primaryUp = false
	for range 40 {
		call()
	}
	if v, _ := l.View("a"); l.Config("a").Route != "backup" || v.Home != "primary" {
		t.Fatalf("not moved to the backup: %+v, home %q", l.Config("a"), v.Home)
	}
	for range 200 { // the move's verification ends
		call()
		if cs := l.Changes("a"); cs[len(cs)-1].State != si.ChangeVerifying {
			break
		}
	}
	cfg := l.Config("a")
	cfg.Timeout, cfg.Version = 42*time.Second, 0
	if _, err := l.Try("a", cfg, "a longer timeout"); err != nil {
		t.Fatal(err)
	}
	rolled := false
	for range 60 {
		if call().Rollback != nil {
			rolled = true
			break
		}
	}
	if !rolled {
		t.Fatal("the tried config was not rolled back")
	}
	primaryUp = true
	for range 500 {
		call()
	}
	if v, _ := l.View("a"); l.Config("a").Route == "backup" {
		t.Errorf("the primary has been back for 500 calls, the agent is still on %q (home %q, next %q)", l.Config("a").Route, v.Home, v.Next)
	}
}
