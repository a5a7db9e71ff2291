package selfimprove_test

import (
	"context"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// firstTokens is a histogram of n times to first token, all in the
// bucket whose upper bound is le.
func firstTokens(n uint64, le time.Duration) si.Histogram {
	h := si.Histogram{Bounds: si.LatencyBuckets(), Counts: make([]uint64, len(si.LatencyBuckets())+1)}
	for i, b := range h.Bounds {
		if b == le {
			h.Counts[i] = n
		}
	}
	h.Count = n
	return h
}

// Stalls before the first token never raise the whole call's Timeout.
func TestStrategyFirstTokenStalls(t *testing.T) {
	cur := si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 2 * time.Second, MaxAttempts: 2}
	with := func(f func(*si.Config)) si.Config { c := cur; f(&c); return c }
	cases := []struct {
		name   string
		s      si.BuiltinStrategy
		cur    si.Config
		first  si.Histogram
		stats  si.Stats
		routes si.Routes
		want   si.Config
		review bool
	}{
		{name: "nothing measured: one more attempt", cur: cur,
			want: with(func(c *si.Config) { c.MaxAttempts = 3 })},
		{name: "first tokens come early: the stalls are hung requests", cur: cur, first: firstTokens(50, 250*time.Millisecond),
			want: with(func(c *si.Config) { c.MaxAttempts = 3 })},
		{name: "too few measured", cur: cur, first: firstTokens(19, 2500*time.Millisecond),
			want: with(func(c *si.Config) { c.MaxAttempts = 3 })},
		{name: "first tokens crowd the bound: raise it", cur: cur, first: firstTokens(50, 2500*time.Millisecond),
			want: with(func(c *si.Config) { c.FirstTokenTimeout = 3 * time.Second })},
		{name: "never above the Timeout", cur: with(func(c *si.Config) { c.FirstTokenTimeout = 8 * time.Second }), first: firstTokens(50, 10*time.Second),
			want: with(func(c *si.Config) { c.FirstTokenTimeout = 10 * time.Second })},
		{name: "at the cap: review beyond it", s: si.BuiltinStrategy{MaxFirstTokenTimeout: 2 * time.Second}, cur: cur, first: firstTokens(50, 2500*time.Millisecond),
			want: with(func(c *si.Config) { c.FirstTokenTimeout = 3 * time.Second }), review: true},
		{name: "at the Timeout: review with no config beyond it", cur: with(func(c *si.Config) { c.FirstTokenTimeout = 10 * time.Second }), first: firstTokens(50, 10*time.Second),
			want: with(func(c *si.Config) { c.FirstTokenTimeout = 10 * time.Second }), review: true},
		{name: "attempts at the cap: review, still no Timeout", s: si.BuiltinStrategy{MaxAttempts: 2}, cur: cur,
			want: with(func(c *si.Config) { c.MaxAttempts = 3 }), review: true},
		{name: "a run of stalls moves the route", cur: cur, stats: si.Stats{ConsecutiveFailures: 5},
			routes: si.Routes{Primary: "a", Fallbacks: []string{"b"}}, want: with(func(c *si.Config) { c.Route = "b" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			an := si.Analysis{Config: c.cur, FirstToken: c.first, Stats: c.stats, Routes: c.routes,
				Clusters: clusters(failure.ClassFirstTokenTimeout, 4)}
			tw, err := c.s.Analyze(context.Background(), an)
			if err != nil || tw == nil {
				t.Fatalf("tweak %v, err %v", tw, err)
			}
			if !tw.Config.Equal(c.want) || tw.Review != c.review {
				t.Errorf("tweak %+v (review %v), want %+v (review %v)", tw.Config, tw.Review, c.want, c.review)
			}
			if tw.Config.Timeout != c.cur.Timeout {
				t.Errorf("Timeout %v → %v: a stall raised the whole call's deadline", c.cur.Timeout, tw.Config.Timeout)
			}
			if tw.Review && !strings.Contains(tw.Rule, "first token") {
				t.Errorf("rule %q", tw.Rule)
			}
		})
	}
}

// A fix learned for a similar stall raises FirstTokenTimeout, never Timeout.
func TestStrategyLearnsNoTimeoutForStalls(t *testing.T) {
	cur := si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 2 * time.Second}
	fix := si.Fix{State: si.FixConfirmed, ChangeID: "ch",
		From: si.Config{Timeout: 10 * time.Second, FirstTokenTimeout: 2 * time.Second},
		To:   si.Config{Timeout: 20 * time.Second, FirstTokenTimeout: 4 * time.Second}}
	an := si.Analysis{Config: cur, Clusters: clusters(failure.ClassFirstTokenTimeout, 4),
		Memories: []si.Memory{{Cluster: "m", Class: failure.ClassFirstTokenTimeout, Confidence: 1, Similarity: 1, Fixes: []si.Fix{fix}}}}
	tw, err := (&si.BuiltinStrategy{}).Analyze(context.Background(), an)
	if err != nil || tw == nil || tw.Review {
		t.Fatalf("tweak %+v, err %v", tw, err)
	}
	if tw.Config.Timeout != cur.Timeout || tw.Config.FirstTokenTimeout != 4*time.Second {
		t.Errorf("learned %+v, want FirstTokenTimeout 4s and Timeout unchanged", tw.Config)
	}
}
