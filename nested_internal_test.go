package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"
)

// TestStateKeepsClusterFrom: a cluster's From round-trips through the
// state file, and a file whose from is longer than the loop writes is
// refused.
func TestStateKeepsClusterFrom(t *testing.T) {
	st := newState("task", Config{Version: 1})
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	st.Tracker.record(0, end, time.Second, true, 1, "tool-2: 503", 7)
	cl, _ := st.observeCluster(7, []byte("tool-<n>: <n>"), "overloaded", "tool-2: 503", end)
	cl.From = boundFrom(strings.Repeat("é", 100))
	if n := len(st.Clusters[0].From); n > maxFrom {
		t.Fatalf("From kept %d bytes, want at most %d", n, maxFrom)
	}
	enc := roundTrip(t, &st)
	long := strings.Replace(string(enc), `"from":"`, `"from":"`+strings.Repeat("x", maxFrom), 1)
	checkRejected(t, []byte(long), "task", "clusters[0].from: longer than 128 bytes")
}

// TestRecentFailuresSeen: a failure looks passed on only from another
// agent's failure kept after the call started, whose error it is or
// wraps.
func TestRecentFailuresSeen(t *testing.T) {
	var r recentFailures
	errA := errors.New("a")
	r.add("x", errors.New("old"))
	since := r.seq.Load()
	r.add("inner", errA)
	r.add("self", errors.New("mine"))
	for _, tt := range []struct {
		agent string
		err   error
		since uint64
		want  bool
	}{
		{"outer", errA, since, true},
		{"outer", errors.Join(errors.New("step"), errA), since, true},
		{"outer", errors.New("a"), since, false}, // the same text is not the same error
		{"inner", errA, since, false},            // its own
		{"outer", errA, since + 1, false},        // kept before the call started
	} {
		if got := r.seen(tt.agent, tt.err, tt.since); got != tt.want {
			t.Errorf("seen(%q, %v, %d) = %v, want %v", tt.agent, tt.err, tt.since, got, tt.want)
		}
	}
	for range 2 * maxRecentFailures {
		r.add("other", errors.New("z"))
	}
	if r.seen("outer", errA, since) {
		t.Error("a failure pushed out of the ring is still seen")
	}
}

// TestNestedHostileChains: a task that passes on a step's error whose
// chain never ends, or whose methods panic, fails at once, with or
// without an attempt context: telling where the failure came from walks a
// bounded part of the chain (an error that cannot be compared is never
// found in it).
func TestNestedHostileChains(t *testing.T) {
	l, err := New(WithStore(NewRAMStore()), WithNotifier(nil), WithStrategy(nil), WithClock(fakeclock.New(time.Unix(0, 0))),
		WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := append(hostileerr.Cases(), hostileerr.Case{Name: "Unwrap and Is that panic", Err: hostileerr.BadUnwrap{}})
	for _, budget := range []bool{false, true} {
		for _, tt := range cases {
			t.Run(fmt.Sprintf("%s, budget %v", tt.Name, budget), func(t *testing.T) {
				ctx := context.Background()
				if budget {
					ctx = WithBudget(ctx, &Budget{})
				}
				var got error
				promptly(t, "a nested call", func() {
					_, got = l.ExecuteWithImprovement(ctx, "task", func(ctx context.Context, _ Config) error {
						_, err := l.ExecuteWithImprovement(ctx, "step", func(context.Context, Config) error { return tt.Err })
						return fmt.Errorf("step: %w", err)
					})
				})
				if got == nil {
					t.Error("the task succeeded")
				}
			})
		}
	}
}
