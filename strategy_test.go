package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/looptest"

	"github.com/google/go-cmp/cmp"

	si "github.com/self-improving-loop/selfimprove"
)

func clusters(counts ...any) []si.Cluster {
	var out []si.Cluster
	for i := 0; i < len(counts); i += 2 {
		c := counts[i].(failure.Class)
		out = append(out, si.Cluster{ID: string(c), Class: c, Count: counts[i+1].(int), LastSeen: t0.Add(time.Duration(i) * time.Second)})
	}
	return out
}

// builtinWant is what a case of TestBuiltinStrategy wants.
type builtinWant struct {
	Config *si.Config // nil: no tweak
	Review bool
	Rule   bool // a rule is filed
}

// builtinCase is a case of TestBuiltinStrategy.
type builtinCase struct {
	name     string
	s        *si.BuiltinStrategy
	cur      si.Config
	cl       []si.Cluster
	rejected []si.Tweak
	want     builtinWant
}

func TestBuiltinStrategy(t *testing.T) {
	type want = builtinWant
	cfg := func(c si.Config) *si.Config { return &c }
	rb := func(c si.Config) []si.Tweak { return []si.Tweak{{Config: c}} }
	fb := withLadder
	cases := []builtinCase{
		{"no failures", nil, si.Config{}, nil, nil, want{}},
		{"timeout x1.5", nil, si.Config{Timeout: 10 * time.Second}, clusters(failure.ClassTimeout, 3), nil,
			want{Config: cfg(si.Config{Timeout: 15 * time.Second})}},
		{"timeout capped", nil, si.Config{Timeout: 100 * time.Second}, clusters(failure.ClassTimeout, 3), nil,
			want{Config: cfg(si.Config{Timeout: 2 * time.Minute})}},
		{"timeout at cap: review beyond it", nil, si.Config{Timeout: 2 * time.Minute}, clusters(failure.ClassTimeout, 3), nil,
			want{Config: cfg(si.Config{Timeout: 3 * time.Minute}), Review: true, Rule: true}},
		{"timeout with no timeout set", nil, si.Config{}, clusters(failure.ClassTimeout, 3), nil,
			want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"timeout rolled back before", nil, si.Config{Timeout: 10 * time.Second}, clusters(failure.ClassTimeout, 3),
			rb(si.Config{Timeout: 15 * time.Second}), want{Config: cfg(si.Config{Timeout: 10 * time.Second}), Review: true, Rule: true}},
		{"custom timeout cap", &si.BuiltinStrategy{MaxTimeout: 12 * time.Second}, si.Config{Timeout: 10 * time.Second},
			clusters(failure.ClassTimeout, 3), nil, want{Config: cfg(si.Config{Timeout: 12 * time.Second})}},
		{"rate limit from nothing", nil, si.Config{}, clusters(failure.ClassRateLimit, 2), nil,
			want{Config: cfg(si.Config{Backoff: time.Second, MaxAttempts: 2})}},
		{"rate limit doubles", nil, si.Config{Backoff: 2 * time.Second, MaxAttempts: 3}, clusters(failure.ClassRateLimit, 2), nil,
			want{Config: cfg(si.Config{Backoff: 4 * time.Second, MaxAttempts: 4})}},
		{"rate limit backoff capped, attempts at cap", nil, si.Config{Backoff: 20 * time.Second, MaxAttempts: 5}, clusters(failure.ClassRateLimit, 2), nil,
			want{Config: cfg(si.Config{Backoff: 30 * time.Second, MaxAttempts: 5})}},
		{"rate limit at caps", nil, si.Config{Backoff: 30 * time.Second, MaxAttempts: 5}, clusters(failure.ClassRateLimit, 2), nil,
			want{Config: cfg(si.Config{Backoff: time.Minute, MaxAttempts: 6}), Review: true, Rule: true}},
		{"overloaded: one more attempt", nil, si.Config{}, clusters(failure.ClassOverloaded, 2), nil,
			want{Config: cfg(si.Config{MaxAttempts: 2})}},
		{"network: one more attempt", nil, si.Config{MaxAttempts: 2}, clusters(failure.ClassNetwork, 2), nil,
			want{Config: cfg(si.Config{MaxAttempts: 3})}},
		{"empty response: one more attempt", nil, si.Config{MaxAttempts: 4}, clusters(failure.ClassEmptyResponse, 2), nil,
			want{Config: cfg(si.Config{MaxAttempts: 5})}},
		{"attempts at cap", nil, si.Config{MaxAttempts: 5}, clusters(failure.ClassNetwork, 2), nil,
			want{Config: cfg(si.Config{MaxAttempts: 6}), Review: true, Rule: true}},
		{"custom attempts cap", &si.BuiltinStrategy{MaxAttempts: 2}, si.Config{MaxAttempts: 2}, clusters(failure.ClassNetwork, 2), nil,
			want{Config: cfg(si.Config{MaxAttempts: 3}), Review: true, Rule: true}},
		{"one more attempt rolled back", nil, si.Config{}, clusters(failure.ClassOverloaded, 2), rb(si.Config{MaxAttempts: 2}),
			want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"model: first fallback", fb, si.Config{Route: "x"}, clusters(failure.ClassModelUnavailable, 2), nil,
			want{Config: cfg(si.Config{Route: "a"})}},
		{"model: next fallback", fb, si.Config{Route: "a"}, clusters(failure.ClassModelUnavailable, 2), nil,
			want{Config: cfg(si.Config{Route: "b"})}},
		{"model: skip a rolled-back route", fb, si.Config{Route: "a"}, clusters(failure.ClassModelUnavailable, 2), rb(si.Config{Route: "b"}),
			want{Config: cfg(si.Config{Route: "c"})}},
		{"model: no fallback left", fb, si.Config{Route: "c"}, clusters(failure.ClassModelUnavailable, 2), nil,
			want{Config: cfg(si.Config{Route: "c"}), Review: true, Rule: true}},
		{"model: no fallbacks configured", nil, si.Config{Route: "x"}, clusters(failure.ClassModelUnavailable, 2), nil,
			want{Config: cfg(si.Config{Route: "x"}), Review: true, Rule: true}},
		{"auth", nil, si.Config{}, clusters(failure.ClassAuth, 2), nil, want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"bad request", nil, si.Config{}, clusters(failure.ClassBadRequest, 2), nil, want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"context length", nil, si.Config{}, clusters(failure.ClassContextLength, 2), nil, want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"content filter", nil, si.Config{}, clusters(failure.ClassContentFilter, 2), nil, want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"other", nil, si.Config{}, clusters(failure.ClassOther, 2), nil, want{Config: cfg(si.Config{}), Review: true, Rule: true}},
		{"dominant class has no safe move: the next class's", nil, si.Config{Timeout: time.Second}, clusters(failure.ClassAuth, 1, failure.ClassTimeout, 2, failure.ClassAuth, 2), nil,
			want{Config: cfg(si.Config{Timeout: 1500 * time.Millisecond})}},
		{"dominant class wins when no other class has a safe move", nil, si.Config{Timeout: time.Second}, clusters(failure.ClassAuth, 1, failure.ClassBadRequest, 2, failure.ClassAuth, 2), nil,
			want{Config: cfg(si.Config{Timeout: time.Second}), Review: true, Rule: true}},
		{"a single failure of another class is not tried", nil, si.Config{Timeout: time.Second}, clusters(failure.ClassAuth, 3, failure.ClassTimeout, 1), nil,
			want{Config: cfg(si.Config{Timeout: time.Second}), Review: true, Rule: true}},
		{"tie: the most recent class", nil, si.Config{Timeout: time.Second}, clusters(failure.ClassAuth, 2, failure.ClassTimeout, 2), nil,
			want{Config: cfg(si.Config{Timeout: 1500 * time.Millisecond})}},
	}
	for _, c := range cases {
		checkBuiltinCase(t, c)
	}
}

// withLadder marks the cases of TestBuiltinStrategy whose agent has the
// route ladder a, b, c.
var withLadder = &si.BuiltinStrategy{}

// checkBuiltinCase runs case c of TestBuiltinStrategy.
func checkBuiltinCase(t *testing.T, c builtinCase) {
	t.Helper()
	s := c.s
	an := si.Analysis{Config: c.cur, Clusters: c.cl, Rejected: c.rejected}
	if s == withLadder {
		an.Routes = si.Routes{Primary: "a", Fallbacks: []string{"b", "c"}}
	}
	if s == nil {
		s = &si.BuiltinStrategy{}
	}
	tw, err := s.Analyze(context.Background(), an)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	var got builtinWant
	if tw != nil {
		got = builtinWant{Config: &tw.Config, Review: tw.Review, Rule: tw.Rule != ""}
		if tw.Reason == "" || tw.Confidence <= 0 || tw.Confidence > 1 {
			t.Errorf("%s: reason %q, confidence %v", c.name, tw.Reason, tw.Confidence)
		}
	}
	if d := cmp.Diff(c.want, got); d != "" {
		t.Errorf("%s (-want +got):\n%s", c.name, d)
	}
}

// bubble runs f in a synctest bubble with a loop on the real (bubble)
// clock and the given strategy.
func bubble(t *testing.T, s si.Strategy, f func(t *testing.T, l *si.Loop, dir string), opts ...si.Option) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l := looptest.NewLoop(t, append([]si.Option{si.WithDir(dir), si.WithStrategy(s)}, opts...)...)
		defer func() { l.Close() }()
		f(t, l, dir)
	})
}

// fail makes a call of agent id that fails with err and returns the
// config it ran under.
func fail(t *testing.T, l *si.Loop, id string, err error) (si.Config, si.Report) {
	t.Helper()
	var got si.Config
	rep, _ := l.ExecuteWithImprovement(context.Background(), id, func(_ context.Context, c si.Config) error {
		got = c
		return err
	})
	return got, rep
}

// Each safe class gets its tweak through ExecuteWithImprovement, and the
// loop enforces it on the next call.
func TestBuiltinStrategyEndToEnd(t *testing.T) {
	cases := []struct {
		err   error
		start si.Config
		check func(t *testing.T, c si.Config, rep si.Report)
	}{
		{context.DeadlineExceeded, si.Config{Timeout: 2 * time.Second}, func(t *testing.T, c si.Config, rep si.Report) {
			if c.Timeout != 3*time.Second {
				t.Errorf("timeout %v", c.Timeout)
			}
		}},
		{errors.New("HTTP 429 Too Many Requests"), si.Config{}, func(t *testing.T, c si.Config, rep si.Report) {
			// The transient floor already made 3 attempts: one more is 4.
			if c.Backoff != time.Second || c.MaxAttempts != 4 || rep.Attempts != 4 || rep.Duration < 500*time.Millisecond {
				t.Errorf("config %+v, %d attempts in %v", c, rep.Attempts, rep.Duration)
			}
		}},
		{errors.New("503 Service Unavailable"), si.Config{}, func(t *testing.T, c si.Config, rep si.Report) {
			if rep.Attempts != 4 {
				t.Errorf("%d attempts", rep.Attempts)
			}
		}},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), si.Config{MaxAttempts: 2}, func(t *testing.T, c si.Config, rep si.Report) {
			if rep.Attempts != 4 {
				t.Errorf("%d attempts", rep.Attempts)
			}
		}},
		{errors.New("the model returned an empty response"), si.Config{}, func(t *testing.T, c si.Config, rep si.Report) {
			if rep.Attempts != 2 {
				t.Errorf("%d attempts", rep.Attempts)
			}
		}},
		{errors.New("model gpt-x has been deprecated"), si.Config{Route: "gpt-x"}, func(t *testing.T, c si.Config, rep si.Report) {
			if c.Route != "fallback" {
				t.Errorf("route %q", c.Route)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(string(failure.Classify(tc.err)), func(t *testing.T) {
			bubble(t, &si.BuiltinStrategy{}, func(t *testing.T, l *si.Loop, _ string) {
				fail(t, l, "a", tc.err)
				if tc.start.Route == "gpt-x" {
					// A withdrawn model is dead loop-wide from its first
					// failure: the next call goes to the fallback at once,
					// which answers, and the agent moves there (issue 40).
					var ran string
					rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, c si.Config) error {
						if ran = c.Route; ran == "gpt-x" {
							return tc.err
						}
						return nil
					})
					if ran != "fallback" || !rep.Success || rep.Improvement == nil {
						t.Fatalf("the call after the model was withdrawn ran on %q: %+v", ran, rep)
					}
					tc.check(t, l.Config("a"), rep)
					return
				}
				_, rep := fail(t, l, "a", tc.err) // the second failure triggers (low-frequency profile)
				if rep.Improvement == nil {
					t.Fatalf("no improvement: %+v", rep)
				}
				c, rep := fail(t, l, "a", tc.err)
				if c.Version != 2 {
					t.Fatalf("ran under v%d", c.Version)
				}
				tc.check(t, c, rep)
			}, si.WithDefaultConfig(tc.start), si.WithRoutes(si.Routes{Primary: "gpt-x", Fallbacks: []string{"fallback"}}))
		})
	}
}

// A tweak that regresses is rolled back and never proposed again: the
// strategy files a proposal instead.
func TestBuiltinStrategyNeverRepeatsARollback(t *testing.T) {
	bubble(t, &si.BuiltinStrategy{}, func(t *testing.T, l *si.Loop, _ string) {
		for range 2 {
			fail(t, l, "a", context.DeadlineExceeded)
		}
		if v := l.Config("a").Version; v != 2 {
			t.Fatalf("no tweak applied: v%d", v)
		}
		for range 5 {
			fail(t, l, "a", context.DeadlineExceeded)
		}
		ch := l.Changes("a")
		if len(ch) != 1 || ch[0].State != si.ChangeRolledBack {
			t.Fatalf("changes %+v", ch)
		}
		// Past the cooldown the same failures trigger again.
		time.Sleep(13 * time.Hour)
		for range 3 {
			fail(t, l, "a", context.DeadlineExceeded)
		}
		if ch := l.Changes("a"); len(ch) != 1 {
			t.Fatalf("the rolled-back tweak came back: %+v", ch)
		}
		ps := l.Proposals(nil)
		if len(ps) != 1 || ps[0].Status != si.ProposalPending || ps[0].Config != nil || ps[0].Class != failure.ClassTimeout {
			t.Fatalf("proposals %+v", ps)
		}
	}, si.WithDefaultConfig(si.Config{Timeout: time.Second}))
}

func TestProposalLifecycle(t *testing.T) {
	bubble(t, &si.BuiltinStrategy{}, func(t *testing.T, l *si.Loop, dir string) {
		authErr := errors.New("401 Unauthorized: invalid api key")
		for range 2 {
			fail(t, l, "auth", authErr)
		}
		// Another round past the cooldown: still one proposal, with the
		// new evidence.
		time.Sleep(13 * time.Hour)
		for range 3 {
			fail(t, l, "auth", authErr)
		}
		ps := l.Proposals(func(p si.Proposal) bool { return p.AgentID == "auth" })
		if len(ps) != 1 {
			t.Fatalf("%d proposals, want 1: %+v", len(ps), ps)
		}
		p := ps[0]
		if p.Status != si.ProposalPending || p.Class != failure.ClassAuth || p.RootCause != failure.RootCauseToolFailure ||
			p.Config != nil || p.Rule == "" || p.Count != 3 || len(p.Examples) != 1 || p.ClusterID == "" {
			t.Fatalf("proposal %+v", p)
		}
		if l.Config("auth").Version != 1 {
			t.Fatal("an unsafe class changed the config")
		}

		// A capped safe move: a proposal with a config, approved and
		// applied through the guard.
		id := approveSafeMove(t, l)

		// Reject closes; the same suggestion is not filed again.
		if err := l.Reject(id, "no"); !errors.Is(err, si.ErrProposalState) {
			t.Fatalf("reject a confirmed proposal: %v", err)
		}
		if err := l.Reject(p.ID, "we rotate keys on Monday"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(13 * time.Hour)
		for range 2 {
			fail(t, l, "auth", authErr)
		}
		ps = l.Proposals(func(p si.Proposal) bool { return p.AgentID == "auth" })
		if len(ps) != 1 || ps[0].Status != si.ProposalRejected || ps[0].Note != "we rotate keys on Monday" {
			t.Fatalf("after reject: %+v", ps)
		}
		if err := l.Approve("nope"); !errors.Is(err, si.ErrProposalNotFound) {
			t.Fatalf("approve unknown: %v", err)
		}

		// Everything survives a restart, and is listed before the agents
		// are called.
		before := l.Proposals(nil)
		l.Close()
		l2, err := si.New(si.WithDir(dir), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
		if d := cmp.Diff(before, l2.Proposals(nil)); d != "" {
			t.Fatalf("proposals after restart (-before +after):\n%s", d)
		}
	}, si.WithProbes(si.ProbePolicy{NoHold: []failure.Class{failure.ClassAuth}})) // the strategy's proposals, not a hold
}

// approveSafeMove drives agent busy of l to a proposal of a capped safe
// move, approves it, checks that it is applied through the guard and
// confirmed, and returns its ID.
func approveSafeMove(t *testing.T, l *si.Loop) string {
	t.Helper()
	if err := l.SetConfig("busy", si.Config{MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		fail(t, l, "busy", errors.New("overloaded"))
	}
	ps := l.Proposals(func(p si.Proposal) bool { return p.AgentID == "busy" })
	if len(ps) != 1 || ps[0].Config == nil || ps[0].Config.MaxAttempts != 6 {
		t.Fatalf("proposal %+v", ps)
	}
	if err := l.Approve(ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := l.Approve(ps[0].ID); !errors.Is(err, si.ErrProposalState) {
		t.Fatalf("approve twice: %v", err)
	}
	c, rep := fail(t, l, "busy", nil)
	if c.MaxAttempts != 6 || c.Version != 3 || !rep.Success {
		t.Fatalf("approved config not in force: %+v", c)
	}
	for range 9 {
		fail(t, l, "busy", nil)
	}
	got := l.Proposals(func(p si.Proposal) bool { return p.AgentID == "busy" })[0]
	ch := l.Changes("busy")
	if got.Status != si.ProposalConfirmed || len(ch) != 1 || ch[0].ProposalID != got.ID || got.ChangeID != ch[0].ID {
		t.Fatalf("after verification: proposal %+v, changes %+v", got, ch)
	}
	return ps[0].ID
}

// Approving a rule-only proposal marks it approved and changes no config;
// if the cluster keeps failing, a new proposal is filed.
func TestApproveRuleOnly(t *testing.T) {
	bubble(t, &si.BuiltinStrategy{}, func(t *testing.T, l *si.Loop, _ string) {
		for range 2 {
			fail(t, l, "a", errors.New("context_length_exceeded"))
		}
		ps := l.Proposals(nil)
		if len(ps) != 1 || ps[0].Class != failure.ClassContextLength {
			t.Fatalf("proposals %+v", ps)
		}
		if err := l.SetConfig("a", si.Config{Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := l.Approve(ps[0].ID); err != nil {
			t.Fatal(err)
		}
		if got := l.Proposals(nil)[0]; got.Status != si.ProposalApproved {
			t.Fatalf("status %s", got.Status)
		}
		if c := l.Config("a"); c.Timeout != time.Second {
			t.Fatalf("a rule-only approval changed the config: %+v", c)
		}
		// The rule did not help: the next analysis files a new proposal.
		time.Sleep(13 * time.Hour)
		for range 2 {
			fail(t, l, "a", errors.New("context_length_exceeded"))
		}
		ps = l.Proposals(nil)
		if len(ps) != 2 || ps[0].Status != si.ProposalApproved || ps[1].Status != si.ProposalPending {
			t.Fatalf("after the approved rule: %+v", ps)
		}

	})
}

// A scripted strategy files a config proposal, then applies a tweak:
// approving the proposal while that tweak is verified fails with
// ErrVerifying, and works once it is decided.
func TestApproveWhileVerifying(t *testing.T) {
	n := 0
	s := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		n++
		c := a.Config
		if n == 1 {
			c.Route = "reviewed"
			return &si.Tweak{Config: c, Reason: "needs a person", Review: true, Confidence: 2}, nil
		}
		c.Route = "auto"
		return &si.Tweak{Config: c, Reason: "automatic"}, nil
	})
	bubble(t, s, func(t *testing.T, l *si.Loop, _ string) {
		for range 2 {
			fail(t, l, "a", errBoom)
		}
		ps := l.Proposals(nil)
		if len(ps) != 1 || ps[0].Config == nil || ps[0].Config.Route != "reviewed" || ps[0].Confidence != 1 {
			t.Fatalf("proposals %+v", ps)
		}
		time.Sleep(13 * time.Hour)
		for range 2 {
			fail(t, l, "a", errBoom)
		}
		if l.Config("a").Route != "auto" {
			t.Fatal("no automatic tweak")
		}
		if err := l.Approve(ps[0].ID); !errors.Is(err, si.ErrVerifying) {
			t.Fatalf("approve while verifying: %v", err)
		}
		for range 10 {
			fail(t, l, "a", nil)
		}
		if err := l.Approve(ps[0].ID); err != nil {
			t.Fatal(err)
		}
		if c := l.Config("a"); c.Route != "reviewed" || c.Version != 3 {
			t.Fatalf("config %+v", c)
		}
		// A regression rolls the approved change back, and the proposal
		// records it: 6 failures in a row, as the 4 of the 14 calls before
		// it failed (5 in a row are 1 in 400 at that rate).
		for range 6 {
			fail(t, l, "a", errBoom)
		}
		if p := l.Proposals(nil)[0]; p.Status != si.ProposalRolledBack || l.Config("a").Route != "auto" {
			t.Fatalf("proposal %+v, config %+v", p, l.Config("a"))
		}
	})
}

// Proposals are bounded per agent: the oldest go first.
func TestProposalsBounded(t *testing.T) {
	review := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		return &si.Tweak{Config: a.Config, Reason: "look", Review: true, Cluster: a.Clusters[0].ID, Rule: "look at " + a.Clusters[0].Signature}, nil
	})
	bubble(t, review, func(t *testing.T, l *si.Loop, _ string) {
		if err := l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour, Cooldown: time.Second}); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			time.Sleep(2 * time.Second)
			fail(t, l, "a", errors.New("failure kind "+string(rune('a'+i))))
		}
		ps := l.Proposals(nil)
		if len(ps) != 16 {
			t.Fatalf("%d proposals kept, want 16", len(ps))
		}
		if ps[0].Rule != "look at failure kind e" || ps[15].Rule != "look at failure kind t" {
			t.Fatalf("kept %q … %q, want the newest 16", ps[0].Rule, ps[15].Rule)
		}
		l.Close()
		if err := l.Approve(ps[0].ID); !errors.Is(err, si.ErrClosed) {
			t.Fatalf("approve after close: %v", err)
		}
		if err := l.Reject(ps[0].ID, "x"); !errors.Is(err, si.ErrClosed) {
			t.Fatalf("reject after close: %v", err)
		}
	})
}
