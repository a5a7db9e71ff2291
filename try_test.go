package selfimprove_test

import (
	"context"
	"errors"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// routeQuality runs n calls of agent "a", each scored by the quality of
// the route its config names, and returns the last call's report and
// the first decision (a rollback or a confirmation) among them, if any.
func (e *env) routeQuality(n int, quality map[string]float64) (si.Report, *si.Change) {
	e.t.Helper()
	var rep si.Report
	for range n {
		var err error
		rep, err = e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, c si.Config) error {
			e.clk.Advance(2 * time.Millisecond)
			return e.l.AddScore(ctx, quality[c.Route])
		})
		if err != nil {
			e.t.Fatal(err)
		}
		if rep.Rollback != nil {
			return rep, rep.Rollback
		}
		if rep.Confirmed != nil {
			return rep, rep.Confirmed
		}
	}
	return rep, nil
}

// TestTry: an operator's Try applies a config as a change verified like
// any other: a worse one (its answers score 0.5 against 0.9) is rolled
// back by the verification, a better one (0.95) confirmed; one while a
// change is verified is refused with ErrVerifying, the current config
// and an invalid one too.
func TestTry(t *testing.T) {
	e := newEnv(t)
	scoringOn(t, e.l)
	quality := map[string]float64{"": 0.9, "cheap": 0.5, "better": 0.95}
	if _, ch := e.routeQuality(60, quality); ch != nil {
		t.Fatalf("a decision without a change: %+v", ch)
	}
	ch, err := e.l.Try("a", si.Config{Route: "cheap"}, "half the price")
	if err != nil || ch.State != si.ChangeVerifying || ch.To.Version != 2 || ch.To.Route != "cheap" || ch.From.Version != 1 {
		t.Fatalf("Try: %+v, %v", ch, err)
	}
	if c := e.l.Config("a"); c.Version != 2 || c.Route != "cheap" {
		t.Fatalf("config after Try: %+v", c)
	}
	if _, err := e.l.Try("a", si.Config{Route: "better"}, "while verifying"); !errors.Is(err, si.ErrVerifying) {
		t.Errorf("Try while a change is verified: %v, want ErrVerifying", err)
	}
	_, dec := e.routeQuality(200, quality)
	if dec == nil || dec.ID != ch.ID || dec.State != si.ChangeRolledBack {
		t.Fatalf("the worse config tried: decision %+v, want change %s rolled back", dec, ch.ID)
	}
	if c := e.l.Config("a"); c.Route != "" {
		t.Fatalf("config after the rollback: %+v", c)
	}
	better, err := e.l.Try("a", si.Config{Route: "better"}, "a better model")
	if err != nil || better.To.Route != "better" {
		t.Fatalf("Try of a better config: %+v, %v", better, err)
	}
	_, dec = e.routeQuality(400, quality)
	if dec == nil || dec.ID != better.ID || dec.State != si.ChangeConfirmed {
		t.Fatalf("the better config tried: decision %+v, want change %s confirmed", dec, better.ID)
	}
	if _, err := e.l.Try("a", si.Config{Route: "better"}, "again"); !errors.Is(err, si.ErrTweakRejected) {
		t.Errorf("Try of the current config: %v, want ErrTweakRejected", err)
	}
	if _, err := e.l.Try("a", si.Config{MaxAttempts: -1}, "bad"); !errors.Is(err, si.ErrInvalidConfig) {
		t.Errorf("Try of an invalid config: %v, want ErrInvalidConfig", err)
	}
	if _, err := e.l.Try("a", si.Config{Version: 9, Route: "x"}, "bad"); !errors.Is(err, si.ErrInvalidConfig) {
		t.Errorf("Try of a config with a version of its own: %v, want ErrInvalidConfig", err)
	}
	// A config rolled back before can be tried again.
	if again, err := e.l.Try("a", si.Config{Route: "cheap"}, "once more"); err != nil || again.To.Route != "cheap" {
		t.Errorf("Try of a config rolled back before: %+v, %v", again, err)
	}
}

// TestTryProposeOnly: under propose-only, Try applies nothing: the
// config is filed as a pending proposal, which Approve applies and
// verifies.
func TestTryProposeOnly(t *testing.T) {
	e := newEnv(t)
	e.call("a", nil, time.Millisecond)
	if err := e.l.SetProposeOnly("a", true); err != nil {
		t.Fatal(err)
	}
	ch, err := e.l.Try("a", si.Config{Route: "cheap"}, "half the price")
	if !errors.Is(err, si.ErrFiledForApproval) || ch.ProposalID == "" || ch.ID != "" {
		t.Fatalf("Try under propose-only: %+v, %v; want ErrFiledForApproval with the proposal's ID", ch, err)
	}
	if c := e.l.Config("a"); c.Version != 1 {
		t.Fatalf("config v%d after a filed Try", c.Version)
	}
	ps := e.l.Proposals(nil)
	if len(ps) != 1 || ps[0].ID != ch.ProposalID || ps[0].Status != si.ProposalPending || ps[0].Config == nil || ps[0].Config.Route != "cheap" {
		t.Fatalf("proposals %+v", ps)
	}
	if err := e.l.Approve(ch.ProposalID); err != nil {
		t.Fatal(err)
	}
	if c := e.l.Config("a"); c.Version != 2 || c.Route != "cheap" {
		t.Fatalf("config after the approval: %+v", c)
	}
	if chs := e.l.Changes("a"); len(chs) != 1 || chs[0].State != si.ChangeVerifying || chs[0].ProposalID != ch.ProposalID {
		t.Fatalf("changes %+v", chs)
	}
}
