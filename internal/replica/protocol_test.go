package replica

import (
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// The scripts the simulator explores: each bounded so that every
// interleaving of it runs (exhaustive), or a seeded sample of them
// (sampled).
var (
	exhaustive = []struct {
		name string
		sc   script
	}{
		{"two replicas decide", script{replicas: 2, decisions: []int{1, 1}}},
		{"two replicas, one decides, a lost answer", script{replicas: 2, decisions: []int{1, 0}, loseAns: 1, polls: 1}},
		{"two replicas, one decides, a commit unreachable", script{replicas: 2, decisions: []int{1, 0}, dropReq: 1, polls: 1}},
		{"two replicas, one decides, a refusal", script{replicas: 2, decisions: []int{1, 0}, refuse: 1, polls: 1}},
		{"two replicas, one decides, backing off", script{replicas: 2, decisions: []int{1, 0}, down: 1, polls: 1}},
		{"one replica, an invalid state, a refusal", script{replicas: 1, decisions: []int{1}, corrupt: 1, polls: 1, refuse: 1}},
		{"a claim beside a save", script{replicas: 1, decisions: []int{1}, claims: []int{1}, polls: 1}},
		{"the state lost", script{replicas: 2, decisions: []int{1, 0}, loseState: 1}},
		{"one replica, a bad key, a refusal", script{replicas: 1, decisions: []int{1}, badKey: 1, polls: 1, refuse: 1}},
	}
	sampled = []struct {
		name string
		sc   script
	}{
		{"two replicas, a lost answer", script{replicas: 2, decisions: []int{1, 1}, loseAns: 1}},
		{"two replicas, a commit unreachable", script{replicas: 2, decisions: []int{1, 1}, dropReq: 1}},
		{"two replicas, a refusal", script{replicas: 2, decisions: []int{1, 1}, refuse: 1}},
		{"two replicas, backing off", script{replicas: 2, decisions: []int{1, 1}, down: 1}},
		{"two lost answers", script{replicas: 2, decisions: []int{2, 1}, claims: []int{1, 0}, loseAns: 2, dropReq: 1, polls: 2}},
		{"two replicas, a poll and a load lost", script{replicas: 2, decisions: []int{1, 1}, polls: 1, failLoad: 1}},
		{"two replicas, an invalid state", script{replicas: 2, decisions: []int{1, 1}, corrupt: 1, polls: 1}},
		{"two replicas, a bad key", script{replicas: 2, decisions: []int{1, 1}, badKey: 1, polls: 1}},
		{"claims beside saves", script{replicas: 2, decisions: []int{1, 0}, claims: []int{1, 1}}},
		{"three replicas decide", script{replicas: 3, decisions: []int{1, 1, 1}, polls: 1}},
		{"one replica decides twice, a lost answer", script{replicas: 2, decisions: []int{2, 0}, loseAns: 1, polls: 1}},
		{"two replicas, the state lost", script{replicas: 2, decisions: []int{1, 1}, loseState: 1, polls: 1}},
		{"every fault", script{replicas: 3, decisions: []int{2, 1, 1}, claims: []int{1, 0, 0}, polls: 2, loseAns: 1, dropReq: 1, refuse: 1, down: 1, failLoad: 1, corrupt: 1, badKey: 1, loseState: 1}},
		{"data loss and the commit faults", script{replicas: 2, decisions: []int{1, 1}, polls: 1, dropReq: 1, refuse: 1, down: 1, loseState: 1}},
	}
)

// skipRace skips an exploration under the race detector: the simulator
// runs on one goroutine, where the detector checks nothing and slows each
// run tenfold. .ci/run runs the explorations without it.
func skipRace(t *testing.T) {
	if raceOn {
		t.Skip("the protocol's explorations run without -race: go test ./internal/replica")
	}
}

// samples is how many interleavings each sampled script runs: 5,000
// (500 with -short); SIM_SAMPLES sets another number.
func samples(t *testing.T) int {
	if v := os.Getenv("SIM_SAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SIM_SAMPLES=%q: %v", v, err)
		}
		return n
	}
	if testing.Short() {
		return 500
	}
	return 5000
}

// TestProtocolInterleavings runs every interleaving of short scripts of
// one and two replicas (decisions, saves, probe claims, polls,
// notifications, and each fault a commit or a load can meet), and a
// seeded sample of the interleavings of longer ones with two and three
// replicas; each run ends synced, and is checked: every replica's copy
// is the fleet's; a decision reported made is in force; one reported
// failed is not, unless its answer was lost and it was recorded when it
// was seen to have landed; no replica has two commits of an agent in
// flight (sim_test.go).
func TestProtocolInterleavings(t *testing.T) {
	skipRace(t)
	var total atomic.Int64
	// The scripts run in parallel (the simulator shares no state): on
	// .ci/run's 2 cores the explorations take half the time.
	t.Cleanup(func() { t.Logf("%d interleavings in all", total.Load()) })
	for _, c := range exhaustive {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runs, all, trace, err := explore(c.sc, 2_000_000)
			total.Add(int64(runs))
			if err != nil {
				t.Fatalf("after %d runs: %v\n%s", runs, err, strings.Join(trace, "\n"))
			}
			if !all {
				t.Fatalf("%d runs left interleavings unexplored", runs)
			}
			t.Logf("every interleaving: %d", runs)
		})
	}
	n := samples(t)
	for k, c := range sampled {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runs, trace, err := sample(c.sc, n, uint64(k+1)*0x9e3779b97f4a7c15)
			total.Add(int64(runs))
			if err != nil {
				t.Fatalf("after %d runs: %v\n%s", runs, err, strings.Join(trace, "\n"))
			}
			t.Logf("%d sampled interleavings", runs)
		})
	}
}

// TestProtocolFindsUndoneFixes: each race the fleet's earlier fixes
// closed is found again, deterministically, once its fix is undone in
// the simulator's driver; with the fix, every interleaving of the same
// script passes (TestProtocolInterleavings explores it).
func TestProtocolFindsUndoneFixes(t *testing.T) {
	skipRace(t)
	cases := []struct {
		name string
		sc   script
		undo func(*script)
		want string
	}{
		{
			// 8c82abb: a save committed its snapshot at a revision a
			// flush's refresh took after the snapshot was made.
			"lost update: a snapshot committed at a newer revision",
			script{replicas: 2, decisions: []int{1, 1}},
			func(sc *script) { sc.staleRev = true },
			"a lost update",
		},
		{
			// 26cba8e: a failed commit's decision stayed in the copy over
			// an invalid state, and landed with the rewrite.
			"ghost decision over an invalid state",
			script{replicas: 1, decisions: []int{1}, corrupt: 1, polls: 1, refuse: 1},
			func(sc *script) { sc.noGhostFix = true },
			"(a ghost)",
		},
		{
			// 42edb50: a probe's claim committed beside the replica's own
			// save, and lost to it as if another replica had claimed.
			"a probe claim racing the replica's own save",
			script{replicas: 1, decisions: []int{1}, claims: []int{1}, polls: 1},
			func(sc *script) { sc.claimNoLock = true },
			"while another of its commits is in flight",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// With the fix, every interleaving of the script passes in
			// TestProtocolInterleavings, which explores it.
			if !slices.ContainsFunc(exhaustive, func(e struct {
				name string
				sc   script
			}) bool {
				return reflect.DeepEqual(e.sc, c.sc)
			}) {
				t.Fatalf("the script is not one TestProtocolInterleavings explores: %+v", c.sc)
			}
			undone := c.sc
			c.undo(&undone)
			found, _, trace, err := explore(undone, 2_000_000)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("with the fix undone, %d runs: %v, want an error naming %q", found, err, c.want)
			}
			t.Logf("undone: found at run %d: %v\n%s", found, err, strings.Join(trace, "\n"))
		})
	}
}

// TestCountsInterleavings: the pooled calls equal the calls made, over
// every interleaving of calls, flushes, deltas lost before the fleet
// booked them and answers lost after (Deltas).
func TestCountsInterleavings(t *testing.T) {
	skipRace(t)
	for _, sc := range []countsScript{
		{replicas: 1, calls: []int{2}, flushes: 3, drop: 1, loseAns: 1},
		{replicas: 2, calls: []int{2, 1}, flushes: 3, drop: 1, loseAns: 1},
		{replicas: 2, calls: []int{1, 1}, flushes: 4, loseAns: 2},
	} {
		runs, all, trace, err := dfs(2_000_000, func(c []int) ([]int, []string, error) { return runCounts(sc, c) })
		if err != nil || !all {
			t.Fatalf("%+v: after %d runs (all: %v): %v\n%s", sc, runs, all, err, strings.Join(trace, "\n"))
		}
		t.Logf("%+v: every interleaving: %d", sc, runs)
	}
}
