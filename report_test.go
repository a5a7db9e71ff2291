package selfimprove_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// TestReportVersionAndString follows one agent through a change and its
// rollback (issue 32): Report.Version is the version in force after the
// call, next to ConfigVersion, the one it ran under, and String says on
// one line what happened, with fn's error scrubbed.
func TestReportVersionAndString(t *testing.T) {
	clk := fakeclock.New(t0)
	strategy := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		c := a.Config
		c.Route = "mirror"
		return &si.Tweak{Config: c, Reason: "try the mirror"}, nil
	})
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithStrategy(strategy), noFloor, si.WithDefaultConfig(si.Config{Route: "primary"}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	secret := errors.New("503 upstream down (Authorization: Bearer sk-live-0123456789abcdef0123456789)")
	call := func() si.Report {
		rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error {
			clk.Advance(time.Second)
			return secret
		})
		return rep
	}
	rep := call()
	if rep.Improvement == nil || rep.ConfigVersion != 1 || rep.Version != 2 {
		t.Fatalf("the call that applied a change: ran under v%d, now v%d, improvement %v", rep.ConfigVersion, rep.Version, rep.Improvement)
	}
	s := rep.String()
	for _, want := range []string{"failed: 1 attempt in 1s under v1: ", "; applied v2 (try the mirror)"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, lacks %q", s, want)
		}
	}
	if strings.Contains(s, "sk-live") || strings.Contains(s, "\n") {
		t.Errorf("String() = %q: a secret or a line break", s)
	}
	for i := 0; i < 50 && rep.Rollback == nil; i++ {
		if rep = call(); rep.Rollback == nil && (rep.ConfigVersion != 2 || rep.Version != 2) {
			t.Fatalf("under verification: ran under v%d, now v%d", rep.ConfigVersion, rep.Version)
		}
	}
	if rep.Rollback == nil || rep.ConfigVersion != 2 || rep.Version != 1 {
		t.Fatalf("the call that rolled back: ran under v%d, now v%d, rollback %v", rep.ConfigVersion, rep.Version, rep.Rollback)
	}
	if s := rep.String(); !strings.Contains(s, "under v2") || !strings.Contains(s, "; rolled back v2 to v1 (") {
		t.Errorf("String() = %q", s)
	}
	ok, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
	if got := ok.String(); got != "ok: 1 attempt in 0s under v1" || ok.Version != 1 {
		t.Errorf("a success: %q, version %d", got, ok.Version)
	}
}

// TestReportCost: Report.Cost is what the call reported with AddCost,
// once its Loop gives calls a slot (its first AddCost or AddScore turns
// them on; see AddCost).
func TestReportCost(t *testing.T) {
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		si.AddCost(ctx, 0.25)
		si.AddCost(ctx, 0.5)
		return nil
	})
	if rep.Cost != 0.75 {
		t.Fatalf("Report.Cost = %v, want 0.75", rep.Cost)
	}
	if s := l.Stats("a"); s.Costed != 1 || s.Cost != 0.75 {
		t.Errorf("stats: %d costed, cost %v; want 1 at 0.75", s.Costed, s.Cost)
	}
}
